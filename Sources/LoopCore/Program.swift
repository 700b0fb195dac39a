/// A complete program: how it starts and how it handles events.
///
/// A program is the pure half of a service. The runtime turns it into a running loop; a test can replay
/// events through it without any runtime at all:
///
/// ```swift
/// let program = Program(first: First(state: State()), update: Update(Counter.update))
/// #expect(program.replay([.increment, .increment]).state == State(count: 2))
/// ```
public struct Program<State, Event, Effect> {
    /// The initial state and the start-up effects.
    public var first: First<State, Effect>
    /// The logic applied to every event.
    public var update: Update<State, Event, Effect>

    /// Creates a program that starts with `first` and handles events with `update`.
    @inlinable
    public init(first: First<State, Effect>, update: Update<State, Event, Effect>) {
        self.first = first
        self.update = update
    }

    /// Folds `events` through the update from the program's start.
    ///
    /// Returns the final state and every effect emitted, in order, beginning with the start-up effects.
    @inlinable
    public func replay(_ events: some Sequence<Event>) -> Next<State, Effect> {
        update.replay(from: first, events: events)
    }
}

extension Program: Sendable where State: Sendable, Effect: Sendable {}
