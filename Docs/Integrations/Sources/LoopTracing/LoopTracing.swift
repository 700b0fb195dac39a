public import EffectHandlers
internal import Instrumentation
public import LoopRuntime
public import Tracing

/// Traces of what loops do, through swift-distributed-tracing: each event's update is a span, and each
/// effect's handler runs in a span, both children of the span of the request that sent the event.
///
/// ``scope(tracer:name:)`` is an `EffectScope` for a router: it captures `ServiceContext.current`
/// where an event is sent (a request handler of Hummingbird, gRPC or any instrumented server runs
/// with its request's context bound), and runs each handler of the effects that event causes in a
/// span (`effect <case>` by default) started from that context, with the span's context bound while
/// the handler runs: what the handler calls (an HTTP client, a database client) and the events it sends
/// are traced under it. A handler's error is recorded on its span. Each processed event gets a span
/// too (`event <case>` by default), a child of the same context, covering its update: the effects' spans
/// are its siblings, since they run after it (in a durable loop, once the event is recorded). An event
/// or effect with no context (from a source, or sent outside any span) starts a trace of its own.
/// Event spans make the loop time every update and hand each event to the loop one at a time: pass
/// `eventName: nil` to leave them out where an event rate of millions a second matters.
///
/// ```swift
/// let router = EffectRouter<Effect, Event>()
///     .route(...)
///     .scoped(LoopTracing.scope())
/// ```
public enum LoopTracing {
    /// A scope that runs each effect's handler in a span of `tracer` (by default the one
    /// `InstrumentationSystem` was bootstrapped with), a child of the context captured where its event
    /// was sent (a root span where none was bound); `name` names the span (by default `effect` and the
    /// effect's case name, never its payload), and `eventName` the span of each processed event (by
    /// default `event` and the event's case name; `nil`: no event spans).
    public static func scope<Effect: Sendable>(
        tracer: (any Tracer)? = nil,
        name: @escaping @Sendable (Effect) -> String = { "effect \(MetricsObserver<Never, Effect>.caseName($0))" },
        eventName: (@Sendable (any Sendable) -> String)? = { "event \(MetricsObserver<Never, Never>.caseName($0))" }
    ) -> EffectScope<Effect> {
        EffectScope<Effect>(
            ServiceContext.self,
            capture: { ServiceContext.current },
            sync: { context, effect, body in
                let span = start(name(effect), under: context, on: tracer)
                defer { span.end() }
                do {
                    try ServiceContext.withValue(span.context) { try body() }
                } catch {
                    throw failed(span, error)
                }
            },
            async: { context, effect, body in
                let span = start(name(effect), under: context, on: tracer)
                defer { span.end() }
                do {
                    try await ServiceContext.withValue(span.context) { try await body() }
                } catch {
                    throw failed(span, error)
                }
            },
            event: eventName.map { eventSpan(named: $0, on: tracer) }
        )
    }

    /// Records a processed event as a span named by `name`, a child of the event's context, covering its
    /// update: it ends now and started the update's duration ago.
    private static func eventSpan(
        named name: @escaping @Sendable (any Sendable) -> String,
        on tracer: (any Tracer)?
    ) -> @Sendable (ServiceContext?, any Sendable, Duration) -> Void {
        { context, event, update in
            let end = DefaultTracerClock.now
            let (seconds, attoseconds) = update.components
            let nanoseconds =
                UInt64(clamping: seconds) &* 1_000_000_000 &+ UInt64(clamping: attoseconds / 1_000_000_000)
            let start = DefaultTracerClock.Timestamp(
                nanosecondsSinceEpoch: end.nanosecondsSinceEpoch - min(nanoseconds, end.nanosecondsSinceEpoch)
            )
            let span = (tracer ?? InstrumentationSystem.tracer).startSpan(
                name(event),
                context: context ?? .topLevel,
                ofKind: .internal,
                at: start
            )
            span.end(at: end)
        }
    }

    /// A span named `name`, a child of `context` (a root span without one), on `tracer` or the
    /// bootstrapped one.
    private static func start(_ name: String, under context: ServiceContext?, on tracer: (any Tracer)?) -> any Span {
        (tracer ?? InstrumentationSystem.tracer).startSpan(name, context: context ?? .topLevel, ofKind: .internal)
    }

    /// Records `error` on `span`, marks it failed, and returns the error to throw.
    private static func failed(_ span: any Span, _ error: any Error) -> any Error {
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
        return error
    }
}
