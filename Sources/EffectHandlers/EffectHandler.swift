public import LoopCore

/// A type that performs one kind of effect and sends its outcome back as events.
///
/// The loop calls ``handle(_:send:)`` once per effect, in a task of its own. Returning means the effect
/// is done; task cancellation is the only stop signal (the loop cancels an effect when its policy or
/// timeout says so, or at shutdown). Throwing does not stop the loop: the error goes to the router's
/// error mapping, or to the loop's observer. Services the handler needs arrive through its
/// initializer.
///
/// ```swift
/// struct FetchHandler: EffectHandler {
///     let client: HTTPClient
///     func handle(_ url: URL, send: Send<Event>) async throws {
///         send(.fetched(try await client.get(url)))
///     }
/// }
/// ```
public protocol EffectHandler<Effect, Event>: Sendable {
    /// The effect this handler performs.
    associatedtype Effect: Sendable
    /// The events it sends back.
    associatedtype Event: Sendable

    /// Performs `effect`, sending zero or more events back to the loop.
    func handle(_ effect: Effect, send: Send<Event>) async throws
}

/// An effect handler made of a closure, for a handler that fits in one expression.
public struct ClosureEffectHandler<Effect: Sendable, Event: Sendable>: EffectHandler {
    private let body: @Sendable (Effect, Send<Event>) async throws -> Void

    /// Creates a handler that performs each effect with `body`.
    public init(_ body: @escaping @Sendable (Effect, Send<Event>) async throws -> Void) {
        self.body = body
    }

    /// Performs `effect` with the closure.
    public func handle(_ effect: Effect, send: Send<Event>) async throws {
        try await body(effect, send)
    }
}
