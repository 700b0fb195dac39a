/// What a spec found: the differences between what it expected and what happened.
///
/// A failing spec has already failed the running test when you get its result; the result
/// is there to inspect, for instance to assert on the report itself.
public struct SpecResult: Hashable, Sendable, CustomStringConvertible {
    /// What the spec checked, e.g. `given State(count: 1), when [.increment]`.
    public var subject: String
    /// Every difference found, in the order of the expectations; empty when the spec passed.
    public var differences: [Difference]

    /// Creates a result for `subject` with the `differences` found.
    public init(subject: String, differences: [Difference]) {
        self.subject = subject
        self.differences = differences
    }

    /// Whether every expectation held.
    public var passed: Bool { differences.isEmpty }

    /// The report shown in a test failure: the subject, then one line per difference.
    public var description: String {
        guard !passed else { return "\(subject): passed" }
        let count = differences.count == 1 ? "1 difference" : "\(differences.count) differences"
        return (["\(subject): \(count)"] + differences.map { "  " + $0.description }).joined(separator: "\n")
    }
}
