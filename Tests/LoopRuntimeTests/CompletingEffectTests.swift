import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// Effects whose route starts them inline and completes them later, from another thread: how a durable
/// loop hands an append to a store's writer without a task waiting for it.
@Suite struct CompletingEffectTests {
    enum Event: Sendable, Equatable {
        case start(String, timeout: Duration? = nil)
        case finished(String)
        case failed(String)
    }

    enum Effect: Sendable, Equatable, ManagedEffect {
        case work(String, timeout: Duration?)

        var lifecycle: EffectLifecycle {
            switch self {
            case .work(_, let timeout?): .concurrent(timeout: timeout)
            case .work: .concurrent()
            }
        }
    }

    struct Failure: Error {}

    /// The work started and not yet completed, by name, with the thread-free means to finish it.
    final class Started: Sendable {
        let waiting = Locked<[String: (send: Send<Event>, done: EffectRouter<Effect, Event>.Completion)]>([:])

        var names: [String] { waiting.withLock { $0.keys.sorted() } }

        func complete(_ name: String, _ result: Result<Void, any Error> = .success(()), times: Int = 1) {
            guard let (send, done) = waiting.withLock({ $0.removeValue(forKey: name) }) else { return }
            if case .success = result { send(.finished(name)) }
            for _ in 0..<times { done(result) }
        }
    }

    static func loop(_ started: Started, clock: any Clock<Duration> = ContinuousClock()) -> Loop<[Event], Event, Effect>
    {
        let router = EffectRouter<Effect, Event>()
            .route(
                { if case .work(let name, _) = $0 { name } else { nil } },
                completing: { name, send, done in started.waiting.withLock { $0[name] = (send, done) } }
            )
            .mapErrors { effect, _ in if case .work(let name, _) = effect { .failed(name) } else { nil } }
        return Loop(
            program: Program(
                first: First(state: []),
                update: Update { log, event in
                    log.append(event)
                    if case .start(let name, let timeout) = event { return [.work(name, timeout: timeout)] }
                    return []
                }
            ),
            effects: router,
            clock: clock
        )
    }

    @Test func aGracefulStopWaitsForTheCompletionAndProcessesWhatItSends() async throws {
        let started = Started()
        let loop = Self.loop(started)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.start("a"))
        // Started inline by the thread that processed the event: no task runs it.
        await waitUntil { started.names == ["a"] }
        loop.stop(gracePeriod: .seconds(3_600))
        #expect(loop.send(.start("late")) == .rejected(.stopping))
        // Still stopping: the effect is running until its completion.
        #expect(loop.isRunning)
        started.complete("a")
        let report = try await run.value
        #expect(report.ending == .drained)
        #expect(report.effectsStarted == 1 && report.effectsCompleted == 1 && report.effectsInFlight == 0)
        #expect(loop.state == [.start("a"), .finished("a")])
    }

    @Test func aFailedCompletionIsMappedAsAThrownErrorWouldBe() async throws {
        let started = Started()
        let loop = Self.loop(started)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.start("b"))
        await waitUntil { started.names == ["b"] }
        started.complete("b", .failure(Failure()))
        await waitUntil { loop.state.count == 2 }
        loop.stop()
        let report = try await run.value
        #expect(report.effectsFailed == 1)
        #expect(loop.state == [.start("b"), .failed("b")])
    }

    @Test func aTimedEffectRunsInATaskAndTimesOutThoughItNeverCompletes() async throws {
        let (started, clock) = (Started(), ManualClock())
        let loop = Self.loop(started, clock: clock)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.start("slow", timeout: .seconds(5)))
        await waitUntil { started.names == ["slow"] }
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(5))
        await waitUntil { loop.state.count == 2 }
        #expect(loop.state == [.start("slow", timeout: .seconds(5)), .failed("slow")])
        // A completion after the timeout changes nothing.
        started.complete("slow")
        loop.stop()
        let report = try await run.value
        #expect(report.effectsTimedOut == 1 && report.effectsCompleted == 0 && report.effectsInFlight == 0)
    }

    @Test func aCompletionCalledTwiceEndsTheEffectOnceInlineOrInATask() async throws {
        let started = Started()
        let loop = Self.loop(started)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        // Uncontrolled: started inline. With a timeout: in a task awaiting the completion.
        loop.send(.start("inline"))
        loop.send(.start("task", timeout: .seconds(3_600)))
        await waitUntil { started.names == ["inline", "task"] }
        started.complete("inline", times: 2)
        started.complete("task", times: 2)
        await waitUntil { loop.state.count == 4 }
        loop.stop()
        let report = try await run.value
        #expect(report.effectsStarted == 2 && report.effectsCompleted == 2 && report.effectsInFlight == 0)
    }

    @Test func anEffectNeverCompletedIsAbandonedAtTheDeadlineAndItsLateCompletionIgnored() async throws {
        let (started, clock) = (Started(), ManualClock())
        let loop = Self.loop(started, clock: clock)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.start("stuck"))
        await waitUntil { started.names == ["stuck"] }
        loop.stop(gracePeriod: .seconds(10))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        let report = try await run.value
        #expect(report.ending == .deadlineExceeded)
        #expect(report.effectsAbandoned == 1 && report.effectsInFlight == 0)
        started.complete("stuck")
        #expect(loop.send(.start("after")) == .rejected(.stopped))
        #expect(loop.state == [.start("stuck")])
    }
}
