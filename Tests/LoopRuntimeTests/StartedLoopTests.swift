import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// Loops started with `start()`, without a task of their own, and how the host runs effects: runners that
/// take jobs one after another, and a hosting task only while something runs.
@Suite struct StartedLoopTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    @Test func aStartedLoopProcessesEventsAndHoldsNoHostUntilAnEffectNeedsOne() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        try loop.start()
        #expect(loop.isRunning)
        // Processed on this thread before `send` returns, as in a loop that runs in `run()`.
        loop.send(.note("one"))
        loop.send(.run([.echo("two")]))
        #expect(loop.state.log == ["one", "two"])
        #expect(loop.hosting == (false, false))
        loop.send(.run([.job("a", .concurrent())]))
        #expect(loop.hosting.hasHost)
        await waitUntil { gates.arrivals("a") == 1 }
        gates.open("a")
        await waitUntil { loop.state.log.last == "finished a" }
        // Nothing runs any more: the hosting task has ended, and the loop holds no task at all.
        await waitUntil { loop.hosting == (true, false) }
        loop.stop()
        let report = await loop.waitUntilStopped()
        #expect(report.ending == .drained)
        // note, run, the echo's note, run, finished.
        #expect(report.eventsProcessed == 5)
        #expect(report.effectsCompleted == 2)
        #expect(recorder.entries.last == .stopped)
    }

    @Test func aStartedLoopsHostStartsATaskForEachBusySpellAndEndsItAfter() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        try loop.start()
        for round in 0..<3 {
            loop.send(.run([.job("j\(round)", .concurrent())]))
            await waitUntil { gates.arrivals("j\(round)") == 1 }
            #expect(loop.hosting == (true, true))
            gates.open("j\(round)")
            await waitUntil { loop.hosting == (true, false) }
        }
        loop.stop()
        let report = await loop.waitUntilStopped()
        #expect(report.effectsCompleted == 3)
        #expect(loop.state.log == ["finished j0", "finished j1", "finished j2"])
    }

    @Test func anEffectThatWaitsDoesNotHoldUpTheOnesBehindIt() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let report = try await running(loop) {
            // "first" waits until the last of the others has run; were they queued behind it, none would.
            let names = (0..<50).map { "job\($0)" }
            loop.send(.run([.job("first", .concurrent())] + names.map { .job($0, .concurrent()) }))
            for name in names { gates.open(name) }
            await waitUntil { names.allSatisfy { loop.state.log.contains("finished \($0)") } }
            #expect(gates.arrivals("first") == 1)
            #expect(!loop.state.log.contains("finished first"))
            gates.open("first")
            await waitUntil { loop.state.log.contains("finished first") }
        }
        #expect(report.effectsCompleted == 51)
    }

    @Test func aBurstOfEffectsRunsEachExactlyOnce() async throws {
        let ran = Locked<[Int]>([])
        let loop = Loop(
            program: Jobs.program,
            effects: EffectRouter<Jobs.Effect, Jobs.Event>()
                .route(
                    { if case .job(let name, _) = $0 { Int(name) } else { nil } },
                    to: ClosureEffectHandler { index, send in
                        ran.withLock { $0.append(index) }
                        send(.append(index))
                    }
                )
        )
        let count = 10_000
        try loop.start()
        // Sent from two threads at once, so the host's queue is fed faster than one runner empties it.
        let sender = OSThread {
            for index in stride(from: 1, to: count, by: 2) { loop.send(.run([.job("\(index)", .concurrent())])) }
        }
        for index in stride(from: 0, to: count, by: 2) { loop.send(.run([.job("\(index)", .concurrent())])) }
        sender.join()
        await waitUntil { loop.state.items.count == count }
        loop.stop()
        let report = await loop.waitUntilStopped()
        #expect(report.ending == .drained)
        #expect(report.effectsCompleted == count)
        #expect(ran.withLock { $0.sorted() } == Array(0..<count))
        #expect(loop.state.items.sorted() == Array(0..<count))
    }

    @Test func aStartedLoopStopsAtItsDeadlineWhenAnEffectIgnoresTheStop() async throws {
        let (recorder, gates, clock) = (Recorded(), Gates(), ManualClock())
        let loop = Jobs.loop(gates: gates, recorder: recorder, clock: clock)
        try loop.start()
        loop.send(.run([.job("stuck", .concurrent())]))
        await waitUntil { gates.arrivals("stuck") == 1 }
        loop.stop(gracePeriod: .seconds(5))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(5))
        let report = await loop.waitUntilStopped()
        #expect(report.ending == .deadlineExceeded)
        #expect(report.effectsAbandoned == 1)
        #expect(loop.send(.note("late")) == .rejected(.stopped))
    }

    @Test func aStartedLoopWithNothingRunningStopsAtOnceAndNeedsNoHost() async throws {
        let loop = Jobs.loop(recorder: Recorded(), clock: ManualClock())
        try loop.start()
        loop.send(.note("one"))
        #expect(loop.hosting == (false, false))
        loop.stop(gracePeriod: .seconds(3_600))
        #expect(!loop.isRunning)
        let report = await loop.waitUntilStopped()
        #expect(report.ending == .drained)
        #expect(report.eventsProcessed == 1)
    }

    @Test func aLoopRunsOnceWhicheverWayItIsStarted() async throws {
        let started = Jobs.loop(recorder: Recorded())
        try started.start()
        #expect(throws: LoopError.alreadyRunning) { try started.start() }
        await #expect(throws: LoopError.alreadyRunning) { try await started.run() }
        started.stop()
        #expect(throws: LoopError.alreadyStopped) { try started.start() }

        let neverRan = Jobs.loop(recorder: Recorded())
        neverRan.send(.note("queued"))
        neverRan.stop()
        #expect(throws: LoopError.alreadyStopped) { try neverRan.start() }
        #expect(await neverRan.waitUntilStopped().ending == .neverStarted)
    }

    @Test func waitingForTheStopEndsWhenTheWaitingTaskIsCancelledAndTheLoopGoesOn() async throws {
        let loop = Jobs.loop(recorder: Recorded())
        try loop.start()
        let waiter = Task { await loop.waitUntilStopped() }
        await waitUntil { loop.phaseWaiters == 1 }
        waiter.cancel()
        let report = await waiter.value
        #expect(report.ending == nil)
        #expect(loop.phaseWaiters == 0)
        #expect(loop.isRunning)
        #expect(loop.send(.note("still running")) == .accepted)
        loop.stop()
        #expect(await loop.waitUntilStopped().ending == .drained)
    }

    @Test func waitersForTheStopAreReleasedWhenTheLoopStops() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let waiters = (0..<5).map { _ in Task { await loop.waitUntilStopped() } }
        // Parked before the start, which releases the tasks waiting for the start and keeps these.
        await waitUntil { loop.phaseWaiters == 5 }
        try loop.start()
        #expect(loop.phaseWaiters == 5)
        loop.send(.run([.job("slow", .concurrent())]))
        await waitUntil { gates.arrivals("slow") == 1 }
        loop.stop()
        gates.open("slow")
        for waiter in waiters { #expect(await waiter.value.ending == .drained) }
        #expect(loop.state.log == ["finished slow"])
    }

    @Test func aStartedLoopRunsItsSourcesUntilItStops() async throws {
        let (stream, continuation) = AsyncStream<Jobs.Event>.makeStream()
        let loop = Loop(
            program: Jobs.program,
            effects: Jobs.router(gates: Gates()),
            sources: [AsyncSequenceSource(stream)]
        )
        try loop.start()
        continuation.yield(.note("from the source"))
        await waitUntil { loop.state.log == ["from the source"] }
        loop.stop()
        #expect(await loop.waitUntilStopped().ending == .drained)
        continuation.finish()
    }

    @Test func aStoppedStartedLoopIsReleased() async throws {
        weak var released: Loop<Jobs.State, Jobs.Event, Jobs.Effect>?
        let gates = Gates()
        do {
            let loop = Jobs.loop(gates: gates, recorder: Recorded(), clock: ManualClock())
            released = loop
            try loop.start()
            loop.send(.run([.job("a", .concurrent())]))
            await waitUntil { gates.arrivals("a") == 1 }
            loop.stop(gracePeriod: .seconds(60))
            gates.open("a")
            #expect(await loop.waitUntilStopped().ending == .drained)
        }
        // Its host's task, its deadline timer and its effect's runner let go of it as they end.
        await waitUntil { released == nil }
    }

    @Test func aStartedLoopThatNeverHadAsynchronousWorkIsFreedWhenDropped() throws {
        weak var released: Loop<Jobs.State, Jobs.Event, Jobs.Effect>?
        do {
            let loop = Jobs.loop(recorder: Recorded())
            released = loop
            try loop.start()
            loop.send(.run([.echo("inline")]))
            #expect(loop.state.log == ["inline"])
        }
        #expect(released == nil)
    }

    @Test func runStopsAtItsDeadlineWhenASourceIgnoresTheStopOfAQuietLoop() async throws {
        let clock = ManualClock()
        let source = Stubborn()
        let loop = Loop(
            program: Jobs.program,
            effects: Jobs.router(gates: Gates()),
            sources: [source],
            clock: clock
        )
        let run = Task { try await loop.run() }
        await waitUntil { source.isRunning }
        loop.stop(gracePeriod: .seconds(5))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(5))
        let report = try await run.value
        #expect(report.ending == .drained)
        // The stop did cancel the source; the source ignored it, and only the deadline ended run().
        #expect(source.wasCancelled)
        source.release()
    }

    @Test func effectsOfRunInheritItsTaskLocalValuesAndThoseOfAStartedLoopDoNot() async throws {
        let seen = Locked<[String?]>([])
        let router = EffectRouter<Jobs.Effect, Jobs.Event>()
            .route(
                { if case .job(let name, _) = $0 { name } else { nil } },
                to: ClosureEffectHandler { name, send in
                    seen.withLock { $0.append(Caller.name) }
                    send(.finished(name))
                }
            )
        let ran = Loop(program: Jobs.program, effects: router)
        try await Caller.$name.withValue("service") {
            let report = try await running(ran) {
                ran.send(.run([.job("a", .concurrent())]))
                await waitUntil { ran.state.log == ["finished a"] }
            }
            #expect(report.effectsCompleted == 1)
        }
        let started = Loop(program: Jobs.program, effects: router)
        try Caller.$name.withValue("caller") {
            try started.start()
            started.send(.run([.job("b", .concurrent())]))
        }
        await waitUntil { started.state.log == ["finished b"] }
        started.stop()
        #expect(seen.withLock { $0 } == ["service", nil])
    }

    @Test func whenRunReturnsAfterItsTaskIsCancelledItsEffectsHaveBeenCancelled() async throws {
        let (cancelled, gates) = (Locked(false), Gates())
        let router = EffectRouter<Jobs.Effect, Jobs.Event>()
            .route(
                { if case .job(let name, _) = $0 { name } else { nil } },
                to: ClosureEffectHandler { name, _ in
                    // Recorded as the cancellation comes, not when the handler gets to run again.
                    try await withTaskCancellationHandler {
                        try await gates.pass(name)
                    } onCancel: {
                        cancelled.withLock { $0 = true }
                    }
                }
            )
        let loop = Loop(program: Jobs.program, effects: router)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.run([.job("forever", .concurrent())]))
        await waitUntil { gates.arrivals("forever") == 1 }
        run.cancel()
        let report = try await run.value
        #expect(report.ending == .cancelled)
        #expect(cancelled.withLock { $0 })
    }
}

/// A task-local value, to see which task an effect runs in.
enum Caller {
    @TaskLocal static var name: String?
}

/// A source that ignores cancellation: it runs until released.
final class Stubborn: EventSource, Sendable {
    private let state = Locked<(running: Bool, waiter: CheckedContinuation<Void, Never>?, released: Bool)>(
        (false, nil, false)
    )

    private let cancelled = Locked(false)

    var isRunning: Bool { state.withLock { $0.running } }

    var wasCancelled: Bool { cancelled.withLock { $0 } }

    func run(send: Send<Jobs.Event>) async throws {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let released = state.withLock { state in
                    state.running = true
                    if !state.released { state.waiter = continuation }
                    return state.released
                }
                if released { continuation.resume() }
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
        }
    }

    func release() {
        let waiter = state.withLock { state in
            state.released = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }
}
