public import LoopCore

/// A type that performs an effect that never waits: a metric, an in-memory write, handing a message to a
/// channel that queues it.
///
/// The loop calls ``handle(_:send:)`` inline, right after the update that asked for the effect, on the
/// thread that processed the event, with no task per effect. That makes it the fast path (millions of
/// effects per second), and it means the handler must not block: anything that waits belongs in an
/// ``EffectHandler``. Events it sends are queued behind the current one, never processed re-entrantly.
public protocol SyncEffectHandler<Effect, Event>: Sendable {
    /// The effect this handler performs.
    associatedtype Effect: Sendable
    /// The events it sends back.
    associatedtype Event: Sendable

    /// Performs `effect` without waiting, sending zero or more events back to the loop.
    func handle(_ effect: Effect, send: Send<Event>) throws
}

/// A synchronous effect handler made of a closure.
public struct ClosureSyncEffectHandler<Effect: Sendable, Event: Sendable>: SyncEffectHandler {
    private let body: @Sendable (Effect, Send<Event>) throws -> Void

    /// Creates a handler that performs each effect with `body`.
    public init(_ body: @escaping @Sendable (Effect, Send<Event>) throws -> Void) {
        self.body = body
    }

    /// Performs `effect` with the closure.
    public func handle(_ effect: Effect, send: Send<Event>) throws {
        try body(effect, send)
    }
}
