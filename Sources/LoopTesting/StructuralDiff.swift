/// The walk behind ``Difference/between(_:_:at:)``: reflects both values with `Mirror` and notes
/// each place where they differ.
struct StructuralDiff {
    /// How deep the walk goes before it compares what remains by rendering (guards against cycles).
    static let maximumDepth = 48
    /// How many differences are listed before the rest are summed up in one line.
    static let maximumDifferences = 64
    /// Collections larger than this product of counts are aligned by position, not by common elements.
    static let maximumAlignmentCells = 250_000

    private(set) var found: [Difference] = []
    private var omitted = 0

    mutating func compare(_ expected: Any, _ actual: Any, path: String, depth: Int) {
        let expectedRendering = Rendering.of(expected)
        let actualRendering = Rendering.of(actual)
        guard type(of: expected) == type(of: actual) else {
            note(path, expectedRendering, actualRendering)
            return
        }
        let expectedMirror = Mirror(reflecting: expected)
        let actualMirror = Mirror(reflecting: actual)
        if depth >= Self.maximumDepth || (expectedMirror.children.isEmpty && actualMirror.children.isEmpty)
            || Rendering.isDescribedByItself(expected, expectedMirror)
        {
            if expectedRendering != actualRendering { note(path, expectedRendering, actualRendering) }
            return
        }
        switch expectedMirror.displayStyle {
        case .optional:
            guard let expectedWrapped = expectedMirror.children.first, let actualWrapped = actualMirror.children.first
            else {
                note(path, expectedRendering, actualRendering)
                return
            }
            compare(expectedWrapped.value, actualWrapped.value, path: path, depth: depth + 1)
        case .enum:
            compareCases(expectedMirror, actualMirror, path: path, depth: depth, expectedRendering, actualRendering)
        case .collection:
            compareSequences(
                expectedMirror.children.map(\.value),
                actualMirror.children.map(\.value),
                path: path,
                depth: depth
            )
        case .dictionary:
            compareDictionaries(expectedMirror, actualMirror, path: path, depth: depth)
        case .set:
            compareSets(expectedMirror, actualMirror, path: path)
        default:
            compareFields(expectedMirror, actualMirror, path: path, depth: depth, expectedRendering, actualRendering)
        }
    }

    /// Both sides are found to differ at `path`; the list is capped at ``maximumDifferences``.
    private mutating func note(_ path: String, _ expected: String, _ actual: String) {
        if found.count < Self.maximumDifferences {
            found.append(Difference(path: path, expected: expected, actual: actual))
        } else {
            omitted += 1
            let summary = Difference(path: "…", expected: "\(omitted) more differences", actual: "not listed")
            if found.count == Self.maximumDifferences {
                found.append(summary)
            } else {
                found[found.count - 1] = summary
            }
        }
    }

    private mutating func compareFields(
        _ expected: Mirror,
        _ actual: Mirror,
        path: String,
        depth: Int,
        _ expectedRendering: String,
        _ actualRendering: String
    ) {
        let expectedFields = Array(expected.children)
        let actualFields = Array(actual.children)
        guard expectedFields.count == actualFields.count else {
            note(path, expectedRendering, actualRendering)
            return
        }
        for (index, (expectedField, actualField)) in zip(expectedFields, actualFields).enumerated() {
            let label = expectedField.label ?? ".\(index)"
            let fieldPath = label.hasPrefix(".") ? path + label : path + "." + label
            compare(expectedField.value, actualField.value, path: fieldPath, depth: depth + 1)
        }
    }

    private mutating func compareCases(
        _ expected: Mirror,
        _ actual: Mirror,
        path: String,
        depth: Int,
        _ expectedRendering: String,
        _ actualRendering: String
    ) {
        guard let expectedPayload = expected.children.first, let actualPayload = actual.children.first,
            let caseName = expectedPayload.label, caseName == actualPayload.label
        else {
            if expectedRendering != actualRendering { note(path, expectedRendering, actualRendering) }
            return
        }
        compare(expectedPayload.value, actualPayload.value, path: path + "." + caseName, depth: depth + 1)
    }

    private mutating func compareSequences(_ expected: [Any], _ actual: [Any], path: String, depth: Int) {
        if expected.count == actual.count {
            for index in expected.indices {
                compare(expected[index], actual[index], path: "\(path)[\(index)]", depth: depth + 1)
            }
            return
        }
        note(path + ".count", String(expected.count), String(actual.count))
        let expectedRenderings = expected.map(Rendering.of)
        let actualRenderings = actual.map(Rendering.of)
        var expectedIndex = 0
        var actualIndex = 0
        for match in Alignment.matches(expectedRenderings, actualRenderings, cellLimit: Self.maximumAlignmentCells)
            + [(expected.count, actual.count)]
        {
            // The elements between two matches were changed (paired by position), removed or inserted.
            while expectedIndex < match.0 && actualIndex < match.1 {
                compare(expected[expectedIndex], actual[actualIndex], path: "\(path)[\(actualIndex)]", depth: depth + 1)
                expectedIndex += 1
                actualIndex += 1
            }
            while expectedIndex < match.0 {
                note("\(path)[\(expectedIndex)]", expectedRenderings[expectedIndex], Rendering.nothing)
                expectedIndex += 1
            }
            while actualIndex < match.1 {
                note("\(path)[\(actualIndex)]", Rendering.nothing, actualRenderings[actualIndex])
                actualIndex += 1
            }
            expectedIndex += 1
            actualIndex += 1
        }
    }

    private mutating func compareDictionaries(_ expected: Mirror, _ actual: Mirror, path: String, depth: Int) {
        let expectedEntries = Self.entries(of: expected)
        let actualEntries = Self.entries(of: actual)
        for key in Set(expectedEntries.keys).union(actualEntries.keys).sorted() {
            let entryPath = "\(path)[\(key)]"
            switch (expectedEntries[key], actualEntries[key]) {
            case (let expectedValue?, let actualValue?):
                compare(expectedValue, actualValue, path: entryPath, depth: depth + 1)
            case (let expectedValue?, nil):
                note(entryPath, Rendering.of(expectedValue), Rendering.nothing)
            case (nil, let actualValue?):
                note(entryPath, Rendering.nothing, Rendering.of(actualValue))
            case (nil, nil):
                break
            }
        }
    }

    private mutating func compareSets(_ expected: Mirror, _ actual: Mirror, path: String) {
        let expectedElements = Set(expected.children.map { Rendering.of($0.value) })
        let actualElements = Set(actual.children.map { Rendering.of($0.value) })
        for missing in expectedElements.subtracting(actualElements).sorted() {
            note("\(path) contains \(missing)", "true", "false")
        }
        for unexpected in actualElements.subtracting(expectedElements).sorted() {
            note("\(path) contains \(unexpected)", "false", "true")
        }
    }

    /// A dictionary's entries keyed by the rendering of their keys.
    private static func entries(of dictionary: Mirror) -> [String: Any] {
        var entries: [String: Any] = [:]
        for entry in dictionary.children {
            let pair = Array(Mirror(reflecting: entry.value).children)
            guard pair.count == 2 else { continue }
            entries[Rendering.of(pair[0].value)] = pair[1].value
        }
        return entries
    }
}
