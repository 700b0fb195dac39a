public import LoopCore

/// A given / when / then specification of an update.
///
/// ```swift
/// let spec = UpdateSpec(Update(Counter.update))
///
/// @Test func incrementLogs() {
///     spec.given(State(count: 1))
///         .when(.increment, .increment)
///         .then(state: State(count: 3), effects: [.log("2"), .log("3")])
/// }
/// ```
///
/// `when` applies its events in order; `then` checks the final state and every effect those events
/// produced, in order. A failure fails the running test (Swift Testing or XCTest) at the
/// line of `then`, with one line per differing field.
public struct UpdateSpec<State, Event, Effect>: Sendable {
    /// The update under test.
    public let update: Update<State, Event, Effect>

    /// Creates a spec of `update`.
    public init(_ update: Update<State, Event, Effect>) {
        self.update = update
    }

    /// Starts a case from `state`.
    public func given(_ state: State) -> Given {
        Given(update: update, state: state)
    }

    /// The starting state of one case.
    public struct Given {
        let update: Update<State, Event, Effect>
        let state: State

        /// Applies `events`, in order, to the given state.
        public func when(_ events: Event...) -> When {
            when(events)
        }

        /// Applies `events`, in order, to the given state.
        public func when(_ events: [Event]) -> When {
            When(
                subject: "given \(Rendering.of(state)), when \(Rendering.of(events))",
                outcome: update.replay(from: First(state: state), events: events)
            )
        }
    }

    /// The outcome of one case, ready to be checked.
    public struct When {
        /// What the case did, for the report.
        let subject: String
        /// The final state and every effect the events produced, in order.
        public let outcome: Next<State, Effect>

        /// Checks `expectations` against the outcome and fails the running test on any that fail.
        @discardableResult
        public func then(
            _ expectations: Then<State, Effect>...,
            fileID: String = #fileID,
            filePath: StaticString = #filePath,
            line: UInt = #line,
            column: UInt = #column
        ) -> SpecResult {
            Spec.check(
                outcome,
                against: expectations,
                subject: subject,
                site: SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
            )
        }
    }
}

extension UpdateSpec.Given: Sendable where State: Sendable {}
extension UpdateSpec.When: Sendable where State: Sendable, Effect: Sendable {}

extension UpdateSpec.When where State: Equatable & Sendable, Effect: Equatable & Sendable {
    /// Checks that the final state is `state` and the effects are exactly `effects`, in order.
    @discardableResult
    public func then(
        state: State,
        effects: [Effect],
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) -> SpecResult {
        Spec.check(
            outcome,
            against: [.state(state), .effects(effects)],
            subject: subject,
            site: SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }
}
