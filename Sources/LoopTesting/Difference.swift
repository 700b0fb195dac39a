/// One place where an expected value and an actual value differ.
///
/// `path` names the place the way Swift code would reach it (`state.jobs[2].status`,
/// `effects[0].retry.after`, `state.sessions["a"]`); `expected` and `actual` render what is there on
/// each side, or `nothing` where one side has no element at that place.
public struct Difference: Hashable, Sendable, CustomStringConvertible {
    /// Where the values differ, as a Swift access path from the compared root.
    public var path: String
    /// What the expected value holds at `path`.
    public var expected: String
    /// What the actual value holds at `path`.
    public var actual: String

    /// Creates a difference at `path`.
    public init(path: String, expected: String, actual: String) {
        self.path = path
        self.expected = expected
        self.actual = actual
    }

    /// `path: expected …, actual …`.
    public var description: String {
        "\(path): expected \(expected), actual \(actual)"
    }

    /// The places where `actual` differs from `expected`, found by walking both structurally.
    ///
    /// Structs, classes and tuples are compared field by field, enums case by case and then by their
    /// associated values, optionals by presence and then by their contents, arrays element by element
    /// (aligning inserted and removed elements when the counts differ), dictionaries key by key and
    /// sets by membership. Values with no inner structure are compared by their rendering. The result is
    /// empty when the two render identically all the way down, and ordered deterministically.
    ///
    /// ```swift
    /// Difference.between(State(count: 2), State(count: 1), at: "state")
    /// // [state.count: expected 2, actual 1]
    /// ```
    public static func between<Value>(_ expected: Value, _ actual: Value, at path: String = "value") -> [Difference] {
        var walk = StructuralDiff()
        walk.compare(expected, actual, path: path, depth: 0)
        return walk.found
    }
}
