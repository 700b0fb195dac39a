// `make lint`'s check that a guide shows the code a build compiles: each ```swift block of a guide in
// the table below is, in order, one region of the guide's Swift file, between a `// snippet` line and an
// `// end snippet` line (compared without the region's common indentation). The Swift file is a test
// target's, so the build compiles the guide's code and the tests run it. Run from the repository's root;
// exits 1, naming each difference. With `--write`, copies the regions into the guides instead.
import Foundation

/// Each guide whose code is compiled, and the files that hold it: their regions, file after file, are the
/// guide's blocks.
let guides = [
    ("README.md", ["Tests/Guides/Readme/Readme.swift"]),
    ("Docs/GettingStarted.md", ["Tests/Guides/GettingStarted/GettingStarted.swift"]),
    ("Docs/Effects.md", ["Tests/Guides/Effects/Effects.swift"]),
    ("Docs/Persistence.md", ["Tests/Guides/Persistence/Persistence.swift"]),
    ("Docs/Cluster.md", ["Tests/Guides/Cluster/Cluster.swift"]),
    // Compiled by the integrations package (`make integrations`), which may import service-lifecycle,
    // swift-log and the other packages this one may not depend on.
    ("Docs/LinuxServices.md", ["Docs/Integrations/Tests/Guides/LinuxServices/LinuxServices.swift"]),
    ("Docs/Runtime.md", ["Tests/Guides/Runtime/Runtime.swift"]),
    ("Docs/Journal.md", ["Tests/Guides/Journal/Journal.swift"]),
    // Each module's page of the documentation site.
    ("Sources/LoopCore/LoopCore.docc/LoopCore.md", ["Tests/Guides/Catalogs/LoopCore.swift"]),
    ("Sources/EffectHandlers/EffectHandlers.docc/EffectHandlers.md", ["Tests/Guides/Catalogs/EffectHandlers.swift"]),
    ("Sources/LoopRuntime/LoopRuntime.docc/LoopRuntime.md", ["Tests/Guides/Catalogs/LoopRuntime.swift"]),
    (
        "Sources/LoopPersistence/LoopPersistence.docc/LoopPersistence.md",
        ["Tests/Guides/Catalogs/LoopPersistence.swift"]
    ),
    ("Sources/LoopPostgres/LoopPostgres.docc/LoopPostgres.md", ["Tests/Guides/Catalogs/LoopPostgres.swift"]),
    // The demo's guide shows the demo's own code and tests.
    ("Docs/Demo.md", ["Sources/LoopDemo/JobRunner.swift", "Tests/LoopDemoTests/JobRunnerTests.swift"]),
]

/// Pages whose Swift blocks are not regions: the integrations package's README shows two lines to put in
/// a manifest, whose working example is that package's own `Package.swift`.
let checkedElsewhere = ["Docs/Integrations/README.md"]

/// Every page a reader may open: the README, the guides, each module's documentation page.
func pages() -> [String] {
    /// The Markdown files under `directory`, at any depth, build folders aside.
    func markdown(under directory: String) -> [String] {
        let paths = (FileManager.default.enumerator(atPath: directory)?.allObjects as? [String]) ?? []
        return paths.filter { $0.hasSuffix(".md") && !$0.split(separator: "/").contains { $0.hasPrefix(".build") } }
            .map { "\(directory)/\($0)" }
    }
    return ["README.md"] + markdown(under: "Docs") + markdown(under: "Sources")
}

/// Whether `block` is a fragment of a `Package.swift` (it starts with the package's `dependencies:`).
func isManifest(_ block: Substring) -> Bool { block.hasPrefix("dependencies:") }

/// Evaluates a `Package.swift` fragment in a manifest of its own (`swift package dump-package`, which
/// resolves nothing); the problem, if it does not evaluate.
func evaluate(manifest fragment: Substring) -> String? {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("guide-check-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let manifest = """
        // swift-tools-version:6.0
        import PackageDescription

        let package = Package(
            name: "Worker",
        \(fragment)
        )

        """
    do {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try manifest.write(to: directory.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        let swift = Process()
        swift.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        swift.arguments = ["swift", "package", "--package-path", directory.path, "dump-package"]
        swift.standardOutput = FileHandle.nullDevice
        swift.standardError = FileHandle.nullDevice
        try swift.run()
        swift.waitUntilExit()
        return swift.terminationStatus == 0 ? nil : "it does not evaluate in a Package.swift"
    } catch {
        return "cannot evaluate it: \(error)"
    }
}

func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

/// The regions of a Swift file, each without its common indentation and opening with the imports its
/// marker names (`// snippet imports A B`), or the problem with them.
func regions(of text: String) -> Result<[String], Problem> {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    let imported = Set(lines.filter { $0.hasPrefix("import ") }.map { $0.dropFirst("import ".count) })
    var found: [String] = []
    var current: (imports: [Substring], lines: [Substring])?
    for line in lines {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed == "// snippet" || trimmed.hasPrefix("// snippet imports ") {
            let imports = trimmed.dropFirst("// snippet imports ".count).split(separator: " ")
            if let missing = imports.first(where: { !imported.contains($0) }) {
                return .failure(Problem("a region shows `import \(missing)`, which the file does not have"))
            }
            current = (imports, [])
        } else if trimmed == "// end snippet" {
            guard let region = current else { return .failure(Problem("an `// end snippet` ends no region")) }
            let opening = region.imports.map { "import \($0)\n" }.joined()
            found.append(opening + (opening.isEmpty ? "" : "\n") + dedented(region.lines))
            current = nil
        } else {
            current?.lines.append(line)
        }
    }
    return current == nil ? .success(found) : .failure(Problem("a region has no `// end snippet`"))
}

struct Problem: Error {
    var text: String
    init(_ text: String) { self.text = text }
}

func dedented(_ lines: [Substring]) -> String {
    let indent =
        lines.filter { !$0.allSatisfy(\.isWhitespace) }.map { $0.prefix(while: { $0 == " " }).count }.min() ?? 0
    return lines.map { $0.allSatisfy(\.isWhitespace) ? "" : String($0.dropFirst(indent)) }.joined(separator: "\n")
}

/// The ```swift blocks of a guide: the range of each block's text, and the line its fence opens on.
func blocks(of text: String) -> [(range: Range<String.Index>, line: Int)] {
    var found: [(Range<String.Index>, Int)] = []
    var searchFrom = text.startIndex
    while let open = text.range(of: "```swift\n", range: searchFrom..<text.endIndex) {
        guard let close = text.range(of: "\n```", range: open.upperBound..<text.endIndex) else { break }
        let line = text[..<open.lowerBound].filter { $0 == "\n" }.count + 1
        found.append((open.upperBound..<close.lowerBound, line))
        searchFrom = close.upperBound
    }
    return found
}

let writing = CommandLine.arguments.contains("--write")
var problems: [String] = []
for (guide, sources) in guides {
    let codes = sources.map(read)
    guard var text = read(guide), !codes.contains(where: { $0 == nil }) else {
        problems.append("cannot read \(guide) or one of \(sources.joined(separator: ", "))")
        continue
    }
    let source = sources.joined(separator: " then ")
    // A fence the comparison would not see (indented, titled, `~~~`) is a block nothing checks.
    for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if (trimmed.hasPrefix("```swift") || trimmed.hasPrefix("~~~swift")) && line != "```swift" {
            problems.append("\(guide):\(number + 1): open a Swift block with ```swift alone, at the start of its line")
        }
    }
    let all = blocks(of: text)
    for block in all where isManifest(text[block.range]) {
        if let problem = evaluate(manifest: text[block.range]) { problems.append("\(guide):\(block.line): \(problem)") }
    }
    let shown = all.filter { !isManifest(text[$0.range]) }
    var compiled: [String] = []
    for (path, code) in zip(sources, codes) {
        switch regions(of: code ?? "") {
        case .success(let found): compiled += found
        case .failure(let problem): problems.append("\(path): \(problem.text)")
        }
    }
    guard shown.count == compiled.count else {
        problems.append("\(guide) has \(shown.count) swift blocks, \(source) \(compiled.count) snippet regions")
        continue
    }
    if writing {
        for (block, region) in zip(shown, compiled).reversed() { text.replaceSubrange(block.range, with: region) }
        do { try text.write(toFile: guide, atomically: true, encoding: .utf8) } catch {
            problems.append("cannot write \(guide): \(error)")
        }
        continue
    }
    for (index, (block, region)) in zip(shown, compiled).enumerated() where String(text[block.range]) != region {
        problems.append(
            "\(guide):\(block.line): block \(index + 1) is not region \(index + 1) of \(source) (`swift .ci/guide-check.swift --write` copies the compiled code in)"
        )
    }
}
// A page with code that nothing compiles is a problem too.
let listed = Set(guides.map(\.0) + checkedElsewhere)
for page in pages() where !listed.contains(page) {
    if let text = read(page), text.contains("```swift") || text.contains("~~~swift") {
        problems.append("\(page) shows Swift code, and no file compiles it: add the page to this check's table")
    }
}
for problem in problems { FileHandle.standardError.write(Data("guide check: \(problem)\n".utf8)) }
if !problems.isEmpty { exit(1) }
print(
    "guide check: \(guides.count) guide\(guides.count == 1 ? "" : "s") show\(guides.count == 1 ? "s" : "") the code the tests compile"
)
