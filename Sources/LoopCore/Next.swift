/// What one event produced: the state after the event and the effects to perform, in order.
///
/// `Next` is the value a test compares. Because it is `Equatable` whenever its parts are, the whole
/// outcome of an event is one assertion:
///
/// ```swift
/// #expect(update(State(count: 1), .increment) == Next(state: State(count: 2), effects: [.log("2")]))
/// ```
///
/// The state is always present. An event that changes nothing produces `Next(state: state)` with the state
/// it was given; an event that only triggers work produces `Next(state: state, effects: [...])`.
public struct Next<State, Effect> {
    /// The state after the event.
    public var state: State
    /// The effects the event asks for, in the order the runtime starts them.
    public var effects: [Effect]

    /// Creates the outcome of an event: `state` after it, and `effects` to perform in order.
    @inlinable
    public init(state: State, effects: [Effect] = []) {
        self.state = state
        self.effects = effects
    }

    /// Whether the event asked for any effect.
    @inlinable
    public var hasEffects: Bool { !effects.isEmpty }
}

extension Next: Equatable where State: Equatable, Effect: Equatable {}
extension Next: Hashable where State: Hashable, Effect: Hashable {}
extension Next: Sendable where State: Sendable, Effect: Sendable {}

extension Next: CustomStringConvertible {
    /// A one-line rendering, `Next(state: …, effects: […])`.
    public var description: String {
        "Next(state: \(state), effects: \(effects))"
    }
}
