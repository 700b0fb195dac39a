public import EffectHandlers
public import LoopCore

/// An effect handler that answers each effect from a script: the events to send back, or an error to
/// throw. For tests that need effects answered but not paused.
///
/// ```swift
/// let handler = ScriptedEffectHandler<Effect, Event> { effect in
///     switch effect {
///     case .fetch(let id): [.fetched(id, "body")]
///     case .save: throw StoreError.full
///     }
/// }
/// ```
///
/// It is an asynchronous handler, so effects it answers go through their lifecycles (keys, policies,
/// timeouts) as in production; ``inline`` answers the same script synchronously.
public struct ScriptedEffectHandler<Effect: Sendable, Event: Sendable>: EffectHandler {
    private let script: @Sendable (Effect) throws -> [Event]

    /// Creates a handler that sends the events `script` returns for each effect, or throws its error.
    public init(_ script: @escaping @Sendable (Effect) throws -> [Event]) {
        self.script = script
    }

    /// The same script as a synchronous handler, run inline right after the update.
    public var inline: ClosureSyncEffectHandler<Effect, Event> {
        ClosureSyncEffectHandler { [script] effect, send in
            for event in try script(effect) { send(event) }
        }
    }

    /// Sends the scripted events for `effect`, in order.
    public func handle(_ effect: Effect, send: Send<Event>) async throws {
        for event in try script(effect) { send(event) }
    }
}
