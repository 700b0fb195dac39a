/// What one event produced: the state after the event and the effects to perform, in order.
///
/// `Next` is the value a test compares. Because it is `Equatable` whenever its parts are, the whole
/// outcome of an event is one assertion:
///
/// ```swift
/// #expect(update(State(count: 1), .increment) == .next(State(count: 2), effects: [.log("2")]))
/// ```
///
/// The state is always present. An event that changes nothing produces `.next(state)` with the state
/// it was given; an event that only triggers work produces `.next(state, effects: [...])`.
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

    /// The event moves to `state` and asks for `effects`, in order.
    @inlinable
    public static func next(_ state: State, effects: [Effect] = []) -> Next {
        Next(state: state, effects: effects)
    }

    /// The event leaves `state` as it is and asks for `effects`, in order.
    ///
    /// The same value as `.next(state, effects: effects)`; the name says at the call site that the state
    /// is not meant to change.
    @inlinable
    public static func dispatch(_ effects: [Effect], keeping state: State) -> Next {
        Next(state: state, effects: effects)
    }

    /// The event changes nothing: `state` stays as it is and no effect is asked for.
    @inlinable
    public static func noChange(_ state: State) -> Next {
        Next(state: state, effects: [])
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
