import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Faults injected into handlers, sources, the inbox and the lifecycle; each test states the guarantee
/// it checks.
@Suite(.serialized) struct FaultTests {
    enum Faulty {
        struct State: Equatable, Sendable {
            var done = 0
            var failed = 0
            var timedOut = 0
            var burst = 0
            var last: Int?
        }

        enum Event: Equatable, Sendable {
            case start(Int)
            case done(Int)
            case failed(Int)
            case timedOut(Int)
            case burst
            case search(Int)
        }

        enum Effect: Equatable, Sendable, ManagedEffect {
            case work(Int)
            case flood(Int)
            case search(Int)

            var lifecycle: EffectLifecycle {
                switch self {
                case .work(let index) where index.isMultiple(of: 5): .concurrent("work-\(index)", timeout: .seconds(1))
                case .work, .flood: .concurrent()
                case .search: .latest("search")
                }
            }
        }

        struct Broken: Error {}

        static let update = Update<State, Event, Effect> { state, event in
            switch event {
            case .start(let index): return [.work(index)]
            case .done(let index):
                state.done += 1
                state.last = index
                return []
            case .failed: state.failed += 1
            case .timedOut: state.timedOut += 1
            case .burst: state.burst += 1
            case .search(let index): return [.search(index)]
            }
            return []
        }
    }

    typealias Recorded = Recorder<Faulty.Event, Faulty.Effect>

    static func router(clock: ManualClock, flood: Int = 0) -> EffectRouter<Faulty.Effect, Faulty.Event> {
        EffectRouter<Faulty.Effect, Faulty.Event>()
            .route(
                { if case .work(let index) = $0 { index } else { nil } },
                to: ClosureEffectHandler { index, send in
                    if index.isMultiple(of: 5) { try await clock.sleep(for: .seconds(3_600)) }
                    if index.isMultiple(of: 3) { throw Faulty.Broken() }
                    send(.done(index))
                }
            )
            .route(
                { if case .flood(let count) = $0 { count } else { nil } },
                to: ClosureEffectHandler { count, send in
                    for _ in 0..<count { send(.burst) }
                }
            )
            .route(
                { if case .search(let index) = $0 { index } else { nil } },
                to: ClosureEffectHandler { index, send in
                    try await clock.sleep(for: .seconds(1))
                    send(.done(index))
                }
            )
            .mapErrors { effect, error in
                guard case .work(let index) = effect else { return nil }
                return (error as? EffectError)?.isTimeout == true ? .timedOut(index) : .failed(index)
            }
    }

    /// Handlers that throw on a fraction of effects and hang past their timeout: the loop keeps
    /// processing; every outcome comes back as an event; the counts add up.
    @Test func throwingAndHangingHandlersNeverStopTheLoop() async throws {
        let (recorder, clock) = (Recorded(), ManualClock())
        let loop = Loop(
            program: Program(first: First(state: Faulty.State()), update: Faulty.update),
            effects: Self.router(clock: clock),
            observer: recorder,
            clock: clock
        )
        let count = 300
        let hanging = (0..<count).count { $0.isMultiple(of: 5) }
        let failing = (0..<count).count { !$0.isMultiple(of: 5) && $0.isMultiple(of: 3) }
        let report = try await running(loop) {
            for index in 0..<count { loop.send(.start(index)) }
            await waitUntil { loop.state.done + loop.state.failed == count - hanging }
            await clock.sleepers(atLeast: 2 * hanging)
            clock.advance(by: .seconds(1))
            await waitUntil { loop.state.timedOut == hanging }
        }
        #expect(loop.state.failed == failing)
        #expect(loop.state.done == count - hanging - failing)
        #expect(report.effectsStarted == count)
        #expect(report.effectsCompleted == loop.state.done)
        #expect(report.effectsFailed == failing)
        #expect(report.effectsTimedOut == hanging)
        #expect(report.effectsInFlight == 0)
        #expect(report.eventsSent == report.eventsProcessed)
    }

    /// A handler that sends thousands of events at once: all are processed, in the loop's own time.
    @Test func aHandlerFloodingTheLoopLosesNothing() async throws {
        let loop = Loop(
            program: Program(first: First(state: Faulty.State(), effects: [.flood(20_000)]), update: Faulty.update),
            effects: Self.router(clock: ManualClock())
        )
        _ = try await running(loop) {
            await waitUntil { loop.state.burst == 20_000 }
        }
        #expect(loop.report.eventsProcessed == 20_000)
    }

    /// A handler that keeps its `Send` and uses it after the loop stopped gets a clear rejection.
    @Test func aHandlerSendingAfterTheStopIsRejectedNotCrashed() async throws {
        let kept = Locked<Send<Faulty.Event>?>(nil)
        let router = EffectRouter<Faulty.Effect, Faulty.Event>()
            .route(
                { if case .flood = $0 { () } else { nil } },
                to: ClosureSyncEffectHandler { _, send in kept.withLock { $0 = send } }
            )
        let loop = Loop(
            program: Program(first: First(state: Faulty.State(), effects: [.flood(0)]), update: Faulty.update),
            effects: router
        )
        _ = try await running(loop) {
            await waitUntil { kept.withLock { $0 } != nil }
        }
        let late = kept.withLock { $0 }
        #expect(late?(.burst) == .rejected(.stopped))
        #expect(loop.report.eventsRejected == 1)
        kept.withLock { $0 = nil }
    }

    /// Sources that throw, finish early, or flood: reported, and the loop keeps running.
    @Test func faultySourcesAreReportedAndTheLoopGoesOn() async throws {
        struct Failure: Error {}
        let recorder = Recorded()
        let sources: [any EventSource<Faulty.Event>] = [
            ClosureEventSource { _ in throw Failure() },
            ClosureEventSource { _ in },
            ClosureEventSource { send in for _ in 0..<50_000 { send(.burst) } },
        ]
        let loop = Loop(
            program: Program(first: First(state: Faulty.State()), update: Faulty.update),
            effects: Self.router(clock: ManualClock()),
            sources: sources,
            observer: recorder
        )
        _ = try await running(loop) {
            await waitUntil { loop.state.burst == 50_000 }
            await recorder.wait(for: .sourceFinished, count: 2)
            await recorder.wait(for: "the failure") {
                $0.contains { if case .sourceFailed = $0 { true } else { false } }
            }
            #expect(loop.send(.done(1)) == .accepted)
        }
        #expect(loop.state.done == 1)
    }

    /// 100,000 `latest` effects with one key, back to back: exactly one completes; nothing is left in
    /// flight, and the loop is released afterwards.
    @Test func aHundredThousandLatestEffectsLeaveExactlyOne() async throws {
        weak var released: Loop<Faulty.State, Faulty.Event, Faulty.Effect>?
        let clock = ManualClock()
        do {
            let loop = Loop(
                program: Program(first: First(state: Faulty.State()), update: Faulty.update),
                effects: Self.router(clock: clock),
                clock: clock
            )
            released = loop
            // 100,000 in `make test`; 10,000 under the sanitizers (EFFECTLOOP_SANITIZED), whose runs
            // look for races and memory errors, not scale, and are 10-50x slower.
            let count = getenv("EFFECTLOOP_SANITIZED") == nil ? 100_000 : 10_000
            let report = try await running(loop) {
                for index in 0..<count { loop.send(.search(index)) }
                await waitUntil { loop.report.effectsCancelled == count - 1 }
                await clock.sleepers(atLeast: 1)
                clock.advance(by: .seconds(1))
                await waitUntil { loop.state.done == 1 }
            }
            #expect(loop.state.last == count - 1)
            #expect(report.effectsCompleted == 1)
            #expect(report.effectsCancelled == count - 1)
            #expect(report.effectsInFlight == 0)
            #expect(clock.sleeperCount == 0)
        }
        #expect(released == nil)
    }

    /// A flood into a bounded inbox, under each policy, from two threads while a third stops the loop:
    /// every event sent is processed, rejected or dropped, exactly, and the report agrees with what the
    /// senders saw.
    @Test(arguments: [InboxPolicy.Overflow.rejectNewest, .dropOldest, .suspendSender])
    func aFloodIntoABoundedInboxIsCountedExactlyThroughAStop(overflow: InboxPolicy.Overflow) async throws {
        let loop = Loop(
            program: Program(first: First(state: Faulty.State()), update: Faulty.update),
            effects: Self.router(clock: ManualClock()),
            inbox: .bounded(64, whenFull: overflow)
        )
        let perSender = 50_000
        let accepted = Atomic<Int>(0)
        let rejected = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let report = try await withThrowingTaskGroup(of: LoopReport.self) { group in
            group.addTask { try await loop.run() }
            while !loop.isRunning { await Task.yield() }
            let senders = (0..<2).map { _ in
                OSThread {
                    for _ in 0..<perSender {
                        if loop.send(.burst).isAccepted {
                            accepted.add(1, ordering: .relaxed)
                        } else {
                            rejected.add(1, ordering: .relaxed)
                        }
                    }
                    finished.add(1, ordering: .releasing)
                }
            }
            // Stops mid-flood: once some events went through, or, if a full inbox turned nearly all
            // away, once the senders are done. Backs off between looks so it does not starve them.
            let stopper = OSThread {
                while loop.report.eventsProcessed < 200 && finished.load(ordering: .acquiring) < 2 { usleep(200) }
                loop.stop()
            }
            for thread in senders + [stopper] { thread.join() }
            return try await group.next() ?? LoopReport()
        }
        // Senders may still be sending (and being rejected) after the stop: count once all are done.
        let final = loop.report
        #expect(final.eventsSent == 2 * perSender)
        #expect(final.eventsProcessed + final.eventsRejected + final.eventsDropped == final.eventsSent)
        #expect(final.eventsRejected == rejected.load(ordering: .relaxed))
        #expect(final.eventsProcessed + final.eventsDropped == accepted.load(ordering: .relaxed))
        #expect(loop.state.burst == final.eventsProcessed)
        // The shutdown report agrees: nothing is processed or dropped after the stop.
        #expect(report.eventsProcessed == final.eventsProcessed)
        #expect(report.eventsDropped == final.eventsDropped)
        if overflow != .dropOldest { #expect(final.eventsDropped == 0) }
    }

    /// Sends from many threads racing the loop's start-up and shutdown: no crash, and every accepted
    /// event is processed.
    @Test func sendsRacingStartAndStopLoseNoAcceptedEvent() async throws {
        for _ in 0..<5 {
            let loop = Loop(
                program: Program(first: First(state: Faulty.State()), update: Faulty.update),
                effects: Self.router(clock: ManualClock())
            )
            let accepted = Atomic<Int>(0)
            let go = Atomic<Bool>(false)
            let senders = (0..<4).map { _ in
                OSThread {
                    while !go.load(ordering: .acquiring) {}
                    for _ in 0..<20_000 where loop.send(.burst).isAccepted { accepted.add(1, ordering: .relaxed) }
                }
            }
            let report = try await withThrowingTaskGroup(of: LoopReport.self) { group in
                go.store(true, ordering: .releasing)
                group.addTask { try await loop.run() }
                await waitUntil { loop.report.eventsProcessed > 100 }
                loop.stop()
                return try await group.next() ?? LoopReport()
            }
            for sender in senders { sender.join() }
            #expect(report.eventsProcessed == accepted.load(ordering: .relaxed))
            #expect(loop.state.burst == accepted.load(ordering: .relaxed))
            #expect(report.eventsDropped == 0)
        }
    }
}
