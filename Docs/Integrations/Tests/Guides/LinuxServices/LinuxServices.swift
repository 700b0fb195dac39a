// The code of Docs/LinuxServices.md, in the nested package because the guide's service uses its
// adapters (RunnableService, LoggingObserver, SwiftMetricsObserver, LoopTracing) and the libraries they
// adapt. Each region between `// snippet` and `// end snippet` is one code block of the guide, in order,
// as the guide shows it (`make lint` compares them; `swift .ci/guide-check.swift --write`, from the
// repository's root, copies them into the guide). What sits outside the regions is what a block needs
// around it to compile: the values a test uses, the parameters a fragment takes.

import EffectHandlers
import EventSources
import InMemoryLogging
import Logging
import LoopCore
import LoopLogging
import LoopMetrics
import LoopPersistence
import LoopRuntime
import LoopServiceLifecycle
import LoopTracing
import ServiceLifecycle
import Testing
import UnixSignals

/// A service's loop: `work` is done by an effect, whose handler reports the request it ran under; a
/// shutdown request stops the loop through its router.
enum Worker {
    typealias State = [String?]

    enum Event: Sendable {
        case shutdownRequested(ProcessSignal)
        case work
        case handled(requestID: String?)
    }

    enum Effect: Sendable {
        case shutDown(Duration)
        case handle
    }

    /// The request ids the handler saw, one per `work` handled.
    static let program = Program<State, Event, Effect>(
        first: First(state: []),
        update: Update { handled, event in
            switch event {
            case .shutdownRequested: return [.shutDown(.seconds(5))]
            case .work: return [.handle]
            case .handled(let requestID):
                handled.append(requestID)
                return []
            }
        }
    )

    static let router = EffectRouter<Effect, Event>()
        .route(
            { if case .handle = $0 { () } else { nil } },
            to: ClosureEffectHandler { _, send in send(.handled(requestID: RequestID.current)) }
        )
        .stopLoop(on: { if case .shutDown(let grace) = $0 { grace } else { nil } })
}

typealias State = Worker.State
typealias Event = Worker.Event
typealias Effect = Worker.Effect

/// Compiled, not run: a running `SignalSource` would catch the test process's SIGINT and SIGTERM for good.
func loopStoppedBySignals(
    program: Program<State, Event, Effect>,
    router: EffectRouter<Effect, Event>
) -> Loop<State, Event, Effect> {
    // snippet
    let loop = Loop(
        program: program,
        effects: router,
        sources: [SignalSource([.interrupt, .terminate]) { signal in .shutdownRequested(signal) }]
    )
    // end snippet
    return loop
}

func runAndReport(_ loop: Loop<State, Event, Effect>) async throws -> LoopReport {
    // snippet
    let report = try await loop.run()
    print("stopped: \(report)")  // the ending is part of the line
    // events: 1200 sent, 1198 processed, 2 rejected, 0 dropped; effects: 310 started, 305 completed, …
    // end snippet
    return report
}

@Test func aLoopStoppedByItsProgramReportsWhatItDid() async throws {
    let loop = Loop(program: Worker.program, effects: Worker.router)
    // The event a signal would send: the program stops the loop.
    loop.send(.shutdownRequested(.terminate))
    let report = try await runAndReport(loop)
    #expect(report.eventsProcessed == 1)
    #expect("\(report)".hasPrefix("events: 1 sent, 1 processed, 0 rejected, 0 dropped; effects:"))
}

/// Compiled, not run: the group runs until SIGTERM or SIGINT reach the process.
func serve(
    program: Program<State, Event, Effect>,
    router: EffectRouter<Effect, Event>,
    directory: String,
    logger: Logger
) async throws {
    // snippet
    let store = try FileEventStore(directory: directory)
    let loop = Loop(program: program, effects: router)
    let group = ServiceGroup(
        configuration: ServiceGroupConfiguration(
            services: [
                // First in the list, so shut down last: the store outlives the loops that use it.
                .init(service: ClosingService("store") { await store.close() }),
                .init(service: RunnableService(loop, name: "jobs", gracePeriod: .seconds(10), logger: logger)),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
    )
    try await group.run()
    // end snippet
}

func measured(
    program: Program<State, Event, Effect>,
    router: EffectRouter<Effect, Event>
) -> (loop: Loop<State, Event, Effect>, metrics: MetricsObserver<Event, Effect>, body: String) {
    // snippet
    let metrics = MetricsObserver<Event, Effect>()
    let loop = Loop(program: program, effects: router, observer: metrics)
    // In the handler of GET /metrics, the body (text/plain; version=0.0.4):
    let body = metrics.render()
    // end snippet
    return (loop, metrics, body)
}

@Test func theMetricsCountWhatTheLoopProcessed() async throws {
    let (loop, metrics, body) = measured(program: Worker.program, router: Worker.router)
    #expect(body.contains("# TYPE effectloop_events_processed_total counter"))
    loop.send(.work)
    loop.send(.shutdownRequested(.terminate))
    _ = try await loop.run()
    let after = metrics.render()
    #expect(after.contains(#"effectloop_events_processed_total{event="work",origin="outside"} 1"#))
    #expect(after.contains(#"effectloop_events_processed_total{event="shutdownRequested",origin="outside"} 1"#))
}

func observedGroup(
    program: Program<State, Event, Effect>,
    router: EffectRouter<Effect, Event>,
    logger: Logger
) -> LoopGroup<String, State, Event, Effect> {
    // snippet
    let observed = LoopGroup<String, State, Event, Effect>(
        program: { _ in program },
        effects: router,
        observer: MulticastLoopGroupObserver([
            LoggingObserver<String, Event, Effect>(logger: logger),
            SwiftMetricsObserver<String, Event, Effect>(dimensions: [("loop", "accounts")]),
        ])
    )
    // end snippet
    return observed
}

@Test func theGroupsLoggerSeesItsEntities() async throws {
    let handler = InMemoryLogHandler()
    var logger = Logger(label: "guide", factory: { _ in handler })
    logger.logLevel = .trace
    let group = observedGroup(program: Worker.program, router: Worker.router, logger: logger)
    let running = Task { try await group.run() }
    _ = await group.waitUntilRunning()
    group.send(.work, to: "alice")
    await group.whenSettled()
    group.stop()
    _ = try await running.value
    let processed = handler.entries.filter { $0.message == "effectloop event processed" }
    #expect(processed.map { $0.metadata["effectloop.event"] } == ["work", "handled"])
    #expect(processed.allSatisfy { $0.metadata["effectloop.entity"] == "alice" })
}

// snippet
enum RequestID {
    @TaskLocal static var current: String?
}
// end snippet

func scoping(_ router: EffectRouter<Effect, Event>) -> EffectRouter<Effect, Event> {
    // snippet
    let scoped = router.scoped(
        EffectScope<Effect>(
            capture: { RequestID.current },
            sync: { id, _, body in try RequestID.$current.withValue(id) { try body() } },
            async: { id, _, body in try await RequestID.$current.withValue(id) { try await body() } }
        )
    )
    // end snippet
    return scoped
}

/// Sends `work` from a task whose request id is `req-1`, runs the loop until it is handled, and returns the
/// request ids its handler saw.
func handledRequests(with router: EffectRouter<Effect, Event>) async throws -> State {
    let loop = Loop(program: Worker.program, effects: router)
    RequestID.$current.withValue("req-1") { _ = loop.send(.work) }
    let running = Task { try await loop.run() }
    _ = await loop.waitUntilRunning()
    await loop.whenSettled()
    loop.stop()
    _ = try await running.value
    return loop.state
}

@Test func aHandlerRunsUnderTheRequestIdOfTheSenderOfItsEvent() async throws {
    #expect(try await handledRequests(with: scoping(Worker.router)) == ["req-1"])
    // Without the scope the handler does not see it: the loop's run processed the event, and no request id
    // is bound there.
    #expect(try await handledRequests(with: Worker.router) == [nil])
}

func tracing(_ router: EffectRouter<Effect, Event>) -> EffectRouter<Effect, Event> {
    // snippet
    let traced = router.scoped(LoopTracing.scope())
    // end snippet
    return traced
}

@Test func aTracedRouterPerformsTheEffectsAsTheRouterDid() async throws {
    // The spans go to the process's tracer (none, or another test's): the effects are performed as before.
    #expect(try await handledRequests(with: tracing(Worker.router)) == [nil])
}
