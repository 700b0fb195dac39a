/// Code run around every effect's handler, with a context captured where the effect's event was sent:
/// how task-local values a request handler sets (a `Logger`, a tracing `ServiceContext`) reach the
/// handlers of the effects its event causes.
///
/// `capture` runs when an event is sent to the loop from outside (`send`, `request`, a group's
/// `send(_:to:)`, an event source), on the sender's task: it reads the values to carry, typically
/// task-locals. The loop keeps what it returns with the event (not in any store or journal), and hands
/// it to `sync` or `async` around the handler of each effect the event's update returns. An event a
/// handler sends is captured there, so it carries what the wrap set (a tracing wrap's span: the
/// follow-up's effects are its children); a chain of effects and events keeps the context. `sync` wraps synchronous
/// handlers (on the thread that processes the event), `async` asynchronous ones (in the effect's
/// task). Each must call `body` exactly once and return or throw what it did; the context is `nil`
/// where `capture` found nothing, and for the program's start-up effects. An event source runs in the
/// task that runs the loop, so its events carry what `capture` reads there. A durable loop's program
/// effects get none yet: the store's commit releases them, for several callers' events at once.
///
/// ```swift
/// enum RequestID { @TaskLocal static var current: String? }
///
/// let scope = EffectScope<Effect, String>(
///     capture: { RequestID.current },
///     sync: { id, _, body in try RequestID.$current.withValue(id) { try body() } },
///     async: { id, _, body in try await RequestID.$current.withValue(id) { try await body() } }
/// )
/// let router = EffectRouter<Effect, Event>().route(...).scoped(scope)
/// ```
public struct EffectScope<Effect: Sendable>: Sendable {
    @usableFromInline
    let capture: @Sendable () -> CarriedContext?
    @usableFromInline
    let sync: @Sendable (CarriedContext?, Effect, () throws -> Void) throws -> Void
    @usableFromInline
    let async: @Sendable (CarriedContext?, Effect, () async throws -> Void) async throws -> Void

    /// Creates a scope that captures a `Context` at each send and runs each handler inside `sync` or
    /// `async` with it.
    public init<Context: Sendable>(
        _ context: Context.Type = Context.self,
        capture: @escaping @Sendable () -> Context?,
        sync: @escaping @Sendable (_ context: Context?, _ effect: Effect, _ body: () throws -> Void) throws -> Void,
        async:
            @escaping @Sendable (_ context: Context?, _ effect: Effect, _ body: () async throws -> Void) async throws
            -> Void
    ) {
        self.capture = { capture().map { CarriedContext($0) } }
        self.sync = { carried, effect, body in try sync(carried?.value as? Context, effect, body) }
        self.async = { carried, effect, body in try await async(carried?.value as? Context, effect, body) }
    }

    @usableFromInline
    init(
        capturing capture: @escaping @Sendable () -> CarriedContext?,
        sync: @escaping @Sendable (CarriedContext?, Effect, () throws -> Void) throws -> Void,
        async: @escaping @Sendable (CarriedContext?, Effect, () async throws -> Void) async throws -> Void
    ) {
        self.capture = capture
        self.sync = sync
        self.async = async
    }

    /// The same scope for a router of `Outer` effects: effects that `extract` finds run inside it;
    /// others (a durable loop's store work) run as they are, and the events they send carry no context:
    /// they may be sent for several callers' events at once.
    @usableFromInline
    func lifted<Outer: Sendable>(_ extract: @escaping @Sendable (Outer) -> Effect?) -> EffectScope<Outer> {
        let (sync, async) = (self.sync, self.async)
        return EffectScope<Outer>(
            capturing: capture,
            sync: { context, outer, body in
                guard let inner = extract(outer) else {
                    return try CarriedContext.$current.withValue(CarriedContext.noContext) { try body() }
                }
                try sync(context, inner, body)
            },
            async: { context, outer, body in
                guard let inner = extract(outer) else {
                    return try await CarriedContext.$current.withValue(CarriedContext.noContext) { try await body() }
                }
                try await async(context, inner, body)
            }
        )
    }

    /// The context to carry with an event sent now: none if the handler sending it is one the scope
    /// does not wrap (a durable loop's store work); otherwise what `capture` reads, which, in a handler
    /// the scope wraps, is what the wrap set.
    @usableFromInline
    package func captured() -> CarriedContext? {
        guard let current = CarriedContext.current else { return capture() }
        return current === CarriedContext.noContext ? nil : current
    }

    /// Runs a synchronous handler inside the scope.
    @usableFromInline
    package func run(_ context: CarriedContext?, _ effect: Effect, _ body: () throws -> Void) throws {
        try CarriedContext.$current.withValue(nil) { try sync(context, effect, body) }
    }

    /// Runs an asynchronous handler inside the scope.
    @usableFromInline
    package func run(_ context: CarriedContext?, _ effect: Effect, _ body: () async throws -> Void) async throws {
        try await CarriedContext.$current.withValue(nil) { try await async(context, effect, body) }
    }

    /// Runs `body` so that the events it sends carry `context`, whatever `capture` would read there.
    @usableFromInline
    package func carrying(_ context: CarriedContext?, _ body: () -> Void) {
        CarriedContext.$current.withValue(context ?? CarriedContext.noContext) { body() }
    }
}

/// The context an ``EffectScope`` captured for one event, kept with it by the loop: a box, so an event
/// carries one reference whatever the context's size.
@usableFromInline
package final class CarriedContext: Sendable {
    /// The context of the handler running on this task, if it runs inside a scope: the events it sends
    /// carry it.
    @TaskLocal
    @usableFromInline
    package static var current: CarriedContext?

    @usableFromInline
    let value: any Sendable

    /// Marks, as ``current``, a handler whose events carry no context.
    @usableFromInline
    static let noContext = CarriedContext(())

    @usableFromInline
    init(_ value: any Sendable) {
        self.value = value
    }
}
