public import LoopCore

/// A specification of how a program starts.
///
/// ```swift
/// FirstSpec(Worker.first(configuration)).then(.state(State(limit: 2)), .effects([.loadJobs]))
/// ```
public struct FirstSpec<State, Effect> {
    /// The start under test.
    public let first: First<State, Effect>

    /// Creates a spec of `first`.
    public init(_ first: First<State, Effect>) {
        self.first = first
    }

    /// Checks `expectations` against the start's state and effects and fails the running test on any that fail.
    @discardableResult
    public func then(
        _ expectations: Then<State, Effect>...,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) -> SpecResult {
        Spec.check(
            Next(state: first.state, effects: first.effects),
            against: expectations,
            subject: "first",
            site: SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }
}

extension FirstSpec: Sendable where State: Sendable, Effect: Sendable {}
