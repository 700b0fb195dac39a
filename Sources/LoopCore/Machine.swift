/// A state machine driven by an update: it owns the state and applies events to it in place.
///
/// `Machine` is the core's own stepping mechanism; the runtime keeps one per loop, and replay folds
/// events through one. Because the machine holds the only reference to its state, applying an event
/// never copies the state, whatever its size.
///
/// ```swift
/// var machine = Machine(state: State(), update: Update(Counter.update))
/// let effects = machine.process(.increment)
/// ```
public struct Machine<State, Event, Effect> {
    /// The current state.
    @inlinable
    public var state: State { storage }

    @usableFromInline
    var storage: State
    /// The logic applied to every event.
    public let update: Update<State, Event, Effect>

    /// Creates a machine in `state` that handles events with `update`.
    @inlinable
    public init(state: consuming State, update: Update<State, Event, Effect>) {
        self.storage = state
        self.update = update
    }

    /// Applies `event` to the state in place and returns the effects it asks for, in order.
    @inlinable
    public mutating func process(_ event: Event) -> [Effect] {
        update(&storage, event)
    }

    /// Ends the machine and hands its state over without copying it.
    @inlinable
    public consuming func finish() -> State {
        storage
    }
}

extension Machine: Sendable where State: Sendable {}
