/// Code run around every effect's handler, with a context captured where the effect's event was sent:
/// how task-local values a request handler sets (a `Logger`, a tracing `ServiceContext`) reach the
/// handlers of the effects its event causes.
///
/// `event`, if given, runs once each event is processed, on the thread that processed it, before its
/// effects start: with the event's context, the event, and how long its update took (a tracing scope
/// records the event's span there). A loop whose scope has it times every update, as an observer makes
/// it do. In a durable loop it is told once of each of the program's events (never of the store's
/// work), when the loop takes it: an event that waits while its entity recovers, a repeat of a
/// recorded key and an event refused after a store failure are told too, with the time taking it took.
///
/// `capture` runs when an event is sent to the loop from outside (`send`, `request`, a group's
/// `send(_:to:)`, an event source), on the sender's task: it reads the values to carry, typically
/// task-locals. The loop keeps what it returns with the event (not in any store or journal), and hands
/// it to `sync` or `async` around the handler of each effect the event's update returns (a durable
/// loop's effects too, released when their event is recorded: each with its own event's context). An event a
/// handler sends is captured there, so it carries what the wrap set (a tracing wrap's span: the
/// follow-up's effects are its children); a chain of effects and events keeps the context. `sync` wraps synchronous
/// handlers (on the thread that processes the event), `async` asynchronous ones (in the effect's
/// task). Each must call `body` exactly once and return or throw what it did; the context is `nil`
/// where `capture` found nothing, and for the program's start-up effects (and a recovered durable
/// loop's resumed ones). An event source runs in the task that runs the loop, so its events carry what
/// `capture` reads there.
///
/// ```swift
/// enum RequestID { @TaskLocal static var current: String? }
///
/// let scope = EffectScope<Effect>(
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
    @usableFromInline
    let event: (@Sendable (CarriedContext?, any Sendable, Duration) -> Void)?

    /// Creates a scope that captures a `Context` at each send and runs each handler inside `sync` or
    /// `async` with it; `event`, if given, is told of each processed event with its context.
    public init<Context: Sendable>(
        _ context: Context.Type = Context.self,
        capture: @escaping @Sendable () -> Context?,
        sync: @escaping @Sendable (_ context: Context?, _ effect: Effect, _ body: () throws -> Void) throws -> Void,
        async:
            @escaping @Sendable (_ context: Context?, _ effect: Effect, _ body: () async throws -> Void) async throws
            -> Void,
        event: (@Sendable (_ context: Context?, _ event: any Sendable, _ update: Duration) -> Void)? = nil
    ) {
        self.capture = { capture().map { CarriedContext($0) } }
        self.sync = { carried, effect, body in try sync(carried?.value as? Context, effect, body) }
        self.async = { carried, effect, body in try await async(carried?.value as? Context, effect, body) }
        if let event {
            self.event = { carried, processed, duration in event(carried?.value as? Context, processed, duration) }
        } else {
            self.event = nil
        }
    }

    @usableFromInline
    init(
        capturing capture: @escaping @Sendable () -> CarriedContext?,
        sync: @escaping @Sendable (CarriedContext?, Effect, () throws -> Void) throws -> Void,
        async: @escaping @Sendable (CarriedContext?, Effect, () async throws -> Void) async throws -> Void,
        event: (@Sendable (CarriedContext?, any Sendable, Duration) -> Void)?
    ) {
        self.capture = capture
        self.sync = sync
        self.async = async
        self.event = event
    }

    /// The same scope for a router of `Outer` effects: effects that `extract` finds run inside it, with
    /// the context `contextOf` finds in the outer effect when it finds one (a durable loop's effect holds
    /// its own event's, `nil` included), else their event's; others (a durable loop's store work) run as they are, and the
    /// events they send carry no context: they may be sent for several callers' events at once.
    @usableFromInline
    func lifted<Outer: Sendable>(
        _ extract: @escaping @Sendable (Outer) -> Effect?,
        context contextOf: (@Sendable (Outer) -> CarriedContext??)? = nil
    ) -> EffectScope<Outer> {
        /// The outer effect's own context when it holds one, else its event's.
        @Sendable func chosen(_ outer: Outer, _ context: CarriedContext?) -> CarriedContext? {
            if let contextOf, case .some(let own) = contextOf(outer) { return own }
            return context
        }
        let (sync, async) = (self.sync, self.async)
        return EffectScope<Outer>(
            capturing: capture,
            sync: { context, outer, body in
                guard let inner = extract(outer) else {
                    return try CarriedContext.$current.withValue(CarriedContext.noContext) { try body() }
                }
                try sync(chosen(outer, context), inner, body)
            },
            async: { context, outer, body in
                guard let inner = extract(outer) else {
                    return try await CarriedContext.$current.withValue(CarriedContext.noContext) { try await body() }
                }
                try await async(chosen(outer, context), inner, body)
            },
            event: event
        )
    }

    /// The same scope for the loop of a wrapper that keeps each event's context in the event itself (a
    /// durable loop): the loop captures nothing where events are sent, and `event` sees only the events
    /// `extract` finds (the program's among the wrapper's inputs), with the context `extract` finds in
    /// them.
    @usableFromInline
    package func forWrapper(
        events extract: @escaping @Sendable (any Sendable) -> (event: any Sendable, context: CarriedContext?)?
    ) -> EffectScope {
        var told: (@Sendable (CarriedContext?, any Sendable, Duration) -> Void)?
        if let event {
            told = { _, outer, duration in
                if let inner = extract(outer) { event(inner.context, inner.event, duration) }
            }
        }
        return EffectScope(capturing: { nil }, sync: sync, async: async, event: told)
    }

    /// Whether the scope is told of each processed event.
    @inlinable
    package var seesEvents: Bool { event != nil }

    /// Tells the scope that `processed` was processed, its update taking `duration`, with its context.
    @inlinable
    package func processed(_ processed: some Sendable, context: CarriedContext?, update duration: Duration) {
        event?(context, processed, duration)
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

/// The context an ``EffectScope`` captured where an event was sent, held as a value where the event's
/// effects wait for something before they run: a durable loop keeps it with each event until the event
/// is recorded, then hands it to the scope around that event's effects.
///
/// Opaque, never recorded, and equal to every other context, so the values holding it (a durable
/// loop's inputs and effects) compare by what they decide, not by who sent them.
public struct EffectContext: Hashable, Sendable {
    /// What the scope captured.
    @usableFromInline
    package let carried: CarriedContext?

    /// No context: what `capture` returns where it finds nothing, and the program's own effects.
    public static let none = EffectContext(nil)

    @inlinable
    package init(_ carried: CarriedContext?) {
        self.carried = carried
    }

    /// What `scope` captures for an event sent now: ``none`` without a scope.
    @inlinable
    package static func captured<Effect>(by scope: EffectScope<Effect>?) -> EffectContext {
        scope.map { EffectContext($0.captured()) } ?? .none
    }

    /// Always `true`: a context is not part of a value's meaning.
    @inlinable
    public static func == (lhs: EffectContext, rhs: EffectContext) -> Bool { true }

    /// Hashes nothing, as every context is equal.
    @inlinable
    public func hash(into hasher: inout Hasher) {}
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
