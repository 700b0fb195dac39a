/// How a program starts: its initial state and the effects to perform at start-up, in order.
///
/// ```swift
/// let first = First(state: State(), effects: [.loadConfiguration])
/// ```
public struct First<State, Effect> {
    /// The state the program starts in.
    public var state: State
    /// The effects the runtime starts before it processes the first event, in order.
    public var effects: [Effect]

    /// Creates a start: `state`, and `effects` to perform at start-up in order.
    @inlinable
    public init(state: State, effects: [Effect] = []) {
        self.state = state
        self.effects = effects
    }
}

extension First: Equatable where State: Equatable, Effect: Equatable {}
extension First: Hashable where State: Hashable, Effect: Hashable {}
extension First: Sendable where State: Sendable, Effect: Sendable {}

extension First: CustomStringConvertible {
    /// A one-line rendering, `First(state: …, effects: […])`.
    public var description: String {
        "First(state: \(state), effects: \(effects))"
    }
}
