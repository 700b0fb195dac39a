import EffectHandlers
import EventSources
import Glibc
import InMemoryLogging
import Logging
import LoopCore
import LoopRuntime
import LoopServiceLifecycle
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing
import UnixSignals

/// A counter whose `.slow` event starts an effect that waits to be let go (or cancelled).
enum Slow {
    enum Event: Sendable, Equatable {
        case slow
        case done
        /// Does nothing: sent to see whether the loop still takes events.
        case probe
    }

    enum Effect: Sendable, Equatable { case wait }

    static func loop(gate: Gate) -> Loop<Int, Event, Effect> {
        Loop(
            program: Program(
                first: First(state: 0),
                update: Update { count, event in
                    switch event {
                    case .slow: return [.wait]
                    case .done:
                        count += 1
                        return []
                    case .probe: return []
                    }
                }
            ),
            effects: EffectRouter<Effect, Event>()
                .route(
                    { $0 },
                    to: ClosureEffectHandler { _, send in
                        try await gate.wait()
                        send(.done)
                    }
                )
        )
    }

    /// Holds effects until opened; counts those waiting.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiting: Int, waiters: [CheckedContinuation<Void, Never>])>(
            (false, 0, [])
        )

        var waiting: Int { state.withLock { $0.waiting } }

        func wait() async throws {
            await withCheckedContinuation { continuation in
                let resume = state.withLock { state in
                    state.waiting += 1
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if resume { continuation.resume() }
            }
            try Task.checkCancellation()
        }

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }
}

/// Waits until `condition` holds, yielding between checks; fails rather than hang.
func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
    for _ in 0..<100_000 {
        if condition() { return }
        try await Task.sleep(for: .milliseconds(1))
    }
    Issue.record("timed out waiting for \(what)")
}

@Suite struct RunnableServiceTests {
    @Test func aGracefulShutdownDrainsTheLoopAndLogsItsReport() async throws {
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test", factory: { _ in handler })
        let gate = Slow.Gate()
        let loop = Slow.loop(gate: gate)
        try await testGracefulShutdown { trigger in
            let service = RunnableService(loop, name: "slow", gracePeriod: .seconds(3_600), logger: logger)
            let running = Task { try await service.run() }
            try await waitUntil("the loop to run") { loop.isRunning }
            loop.send(.slow)
            try await waitUntil("the effect to start") { gate.waiting == 1 }
            trigger.triggerGracefulShutdown()
            // Stopping: new events are turned away, the effect in flight may finish.
            try await waitUntil("the loop to stop taking events") { loop.send(.probe) == .rejected(.stopping) }
            gate.open()
            try await running.value
        }
        #expect(loop.state == 1)
        let stopped = try #require(handler.entries.last)
        #expect(stopped.message == "effectloop part stopped")
        #expect(stopped.level == .info)
        #expect(stopped.metadata["effectloop.ending"] == "drained")
        #expect(stopped.metadata["effectloop.service"] == "slow")
        #expect(stopped.metadata["effectloop.events_processed"] == "2")
    }

    @Test func aCancellationSignalAfterTheGracefulOneEndsTheLoopAtOnce() async throws {
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test", factory: { _ in handler })
        let gate = Slow.Gate()
        let loop = Slow.loop(gate: gate)
        // `UnixSignal` is service-lifecycle's, though EventSources is imported too (its type is `ProcessSignal`).
        let graceful: [UnixSignal] = [.sigusr1]
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: RunnableService(loop, gracePeriod: .seconds(3_600), logger: logger))],
                gracefulShutdownSignals: graceful,
                cancellationSignals: [.sigusr2],
                logger: logger
            )
        )
        let running = Task { try await group.run() }
        try await waitUntil("the loop to run") { loop.isRunning }
        loop.send(.slow)
        try await waitUntil("the effect to start") { gate.waiting == 1 }
        kill(getpid(), SIGUSR1)
        try await waitUntil("the graceful shutdown") { loop.send(.probe) == .rejected(.stopping) }
        // The effect would hold the loop for an hour; the second signal cancels it.
        kill(getpid(), SIGUSR2)
        try await running.value
        let stopped = try #require(handler.entries.first { $0.message == "effectloop part stopped" })
        #expect(stopped.level == .warning)
        #expect(stopped.metadata["effectloop.ending"] == "cancelled")
        #expect(stopped.metadata["effectloop.effects_abandoned"] == "1")
        #expect(loop.state == 0)
    }

    @Test func aShutdownBeforeThePartRanStopsItForGoodWithoutAnError() async throws {
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test", factory: { _ in handler })
        let loop = Slow.loop(gate: Slow.Gate())
        try await testGracefulShutdown { trigger in
            trigger.triggerGracefulShutdown()
            try await RunnableService(loop, logger: logger).run()
        }
        #expect(handler.entries.map(\.message) == ["effectloop part stopped before it ran"])
        #expect(loop.report.ending == .neverStarted)
    }

    @Test func theClosingServiceClosesAfterTheLoopsThatComeAfterIt() async throws {
        let order = Mutex<[String]>([])
        let loop = Slow.loop(gate: Slow.Gate())
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    .init(service: ClosingService("store") { order.withLock { $0.append("store closed") } }),
                    .init(
                        service: RecordingService(RunnableService(loop)) {
                            order.withLock { $0.append("loop stopped") }
                        }
                    ),
                ],
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            )
        )
        let running = Task { try await group.run() }
        try await waitUntil("the loop to run") { loop.isRunning }
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(order.withLock { $0 } == ["loop stopped", "store closed"])
    }
}

/// A service that calls `done` when the service it wraps returns.
struct RecordingService<Base: Service>: Service {
    let base: Base
    let done: @Sendable () -> Void

    init(_ base: Base, done: @escaping @Sendable () -> Void) {
        self.base = base
        self.done = done
    }

    func run() async throws {
        try await base.run()
        done()
    }
}
