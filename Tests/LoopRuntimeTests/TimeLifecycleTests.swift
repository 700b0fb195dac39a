import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// A program that asks for whatever effect it is told to, and records the names its handler reports.
enum Timed {
    struct State: Equatable, Sendable {
        var done: [String] = []
    }

    enum Event: Equatable, Sendable {
        case ask(Effect)
        case done(String)
    }

    enum Effect: Equatable, Sendable, ManagedEffect {
        case later(String, by: Duration, key: EffectKey? = nil)
        case search(String)
        case hit(Int, latest: Bool = true)
        case cancel(EffectKey)
        /// Waits at the gate "slow", then asks for `then`.
        indirect case slow(then: Effect)

        var lifecycle: EffectLifecycle {
            switch self {
            case .later(_, let delay, let key): .delayed(by: delay, key: key)
            case .search: .debounce("search", for: .seconds(1))
            case .hit(_, let latest): .throttle("hit", every: .seconds(10), latest: latest)
            case .cancel(let key): .cancel(key)
            case .slow: .concurrent()
            }
        }

        var name: String? {
            switch self {
            case .later(let name, _, _): name
            case .search(let text): "search \(text)"
            case .hit(let number, _): "hit \(number)"
            case .cancel, .slow: nil
            }
        }
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .ask(let effect): return [effect]
        case .done(let name):
            state.done.append(name)
            return []
        }
    }

    /// A loop on `clock` whose handler records each effect it starts in `started`.
    static func loop(clock: ManualClock, started: Locked<[String]>) -> Loop<State, Event, Effect> {
        Loop(
            program: Program(first: First(state: State()), update: Update(update)),
            effects: EffectRouter<Effect, Event>()
                .route(
                    { $0.name },
                    to: ClosureEffectHandler { name, send in
                        started.withLock { $0.append(name) }
                        send(.done(name))
                    }
                ),
            clock: clock
        )
    }
}

@Suite("Time-based lifecycles")
struct TimeLifecycleTests {
    let clock = ManualClock()
    let started = Locked<[String]>([])

    @Test func lifecyclesReadAsTheirFactories() {
        #expect(EffectLifecycle.delayed(by: .seconds(2)).description == ".delayed(by: 2.0 seconds)")
        #expect(
            EffectLifecycle.delayed(by: .seconds(2), key: "retry").description
                == #".delayed(by: 2.0 seconds, key: "retry")"#
        )
        #expect(
            EffectLifecycle.debounce("search", for: .seconds(1)).description
                == #".debounce("search", for: 1.0 seconds)"#
        )
        #expect(
            EffectLifecycle.throttle("hit", every: .seconds(10), latest: false).description
                == #".throttle("hit", every: 10.0 seconds, latest: false)"#
        )
        #expect(EffectLifecycle.debounce("a", for: .seconds(1)) != EffectLifecycle.latest("a"))
    }

    @Test func aDelayedEffectStartsWhenItsDelayHasPassedOnTheClock() async throws {
        let loop = Timed.loop(clock: clock, started: started)
        let running = Task { try await loop.run() }
        loop.send(.ask(.later("reminder", by: .seconds(5))))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(4))
        // Still waiting: its sleeper was not woken (advance wakes due sleepers before it returns).
        #expect(clock.sleeperCount == 1)
        #expect(started.withLock { $0 }.isEmpty)
        clock.advance(by: .seconds(1))
        await waitUntil("the reminder ran") { loop.state.done == ["reminder"] }
        loop.stop()
        let report = try await running.value
        #expect(report.effectsStarted == 1)
        #expect(report.effectsCompleted == 1)
    }

    @Test func aDelayedEffectIsCancelledByItsKeyBeforeItStarts() async throws {
        let loop = Timed.loop(clock: clock, started: started)
        let running = Task { try await loop.run() }
        loop.send(.ask(.later("retry", by: .seconds(5), key: "retry")))
        await clock.sleepers(atLeast: 1)
        loop.send(.ask(.cancel("retry")))
        await waitUntil("the wait ended") { clock.sleeperCount == 0 }
        clock.advance(by: .seconds(10))
        loop.stop()
        let report = try await running.value
        #expect(started.withLock { $0 }.isEmpty)
        #expect(report.effectsCancelled == 1)
        #expect(report.effectsStarted == 0)
    }

    @Test func aDebounceStartsExactlyOneEffectPerQuietPeriod() async throws {
        let loop = Timed.loop(clock: clock, started: started)
        let running = Task { try await loop.run() }
        for burst in 0..<3 {
            for letter in ["a", "b", "c", "d"] {
                loop.send(.ask(.search("\(burst)\(letter)")))
                // Processed (so the one it replaces is cancelled), and its wait begun: a replaced effect
                // never sleeps on the clock once cancelled, so the one sleeper is this search's.
                await loop.whenIdle()
                await clock.sleepers(atLeast: 1)
                #expect(clock.sleeperCount == 1)
                // Less than the quiet period: the next one replaces this one.
                clock.advance(by: .milliseconds(900))
            }
            #expect(started.withLock { $0.count } == burst)
            clock.advance(by: .milliseconds(100))
            await waitUntil("the burst's search ran and ended") {
                loop.state.done.count == burst + 1 && loop.liveEffects == 0
            }
        }
        #expect(started.withLock { $0 } == ["search 0d", "search 1d", "search 2d"])
        loop.stop()
        let report = try await running.value
        #expect(report.effectsStarted == 3)
        #expect(report.effectsCancelled == 9)
    }

    @Test func aThrottleStartsTheFirstAtOnceAndTheLatestWhenTheIntervalEnds() async throws {
        let loop = Timed.loop(clock: clock, started: started)
        let running = Task { try await loop.run() }
        loop.send(.ask(.hit(1)))
        await waitUntil("the first hit ran") { loop.state.done == ["hit 1"] }
        loop.send(.ask(.hit(2)))
        loop.send(.ask(.hit(3)))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(9))
        #expect(clock.sleeperCount == 1)
        #expect(started.withLock { $0 } == ["hit 1"])
        clock.advance(by: .seconds(1))
        await waitUntil("the latest hit ran") { loop.state.done == ["hit 1", "hit 3"] }
        // Starting hit 3 opened the next interval, which ends with nothing waiting.
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        await waitUntil("the key is free") { loop.throttleIntervals == 0 }
        loop.send(.ask(.hit(4)))
        await waitUntil("a hit after a free interval runs at once") { loop.state.done.count == 3 }
        loop.stop()
        let report = try await running.value
        #expect(started.withLock { $0 } == ["hit 1", "hit 3", "hit 4"])
        #expect(report.effectsDropped == 1)
    }

    @Test func aThrottleWithoutLatestDropsWhatComesWithinTheInterval() async throws {
        let loop = Timed.loop(clock: clock, started: started)
        let running = Task { try await loop.run() }
        loop.send(.ask(.hit(1, latest: false)))
        loop.send(.ask(.hit(2, latest: false)))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        await waitUntil("the interval ended") { loop.throttleIntervals == 0 }
        loop.send(.ask(.hit(3, latest: false)))
        await waitUntil("the third hit ran") { loop.state.done.count == 2 }
        loop.stop()
        let report = try await running.value
        #expect(started.withLock { $0 } == ["hit 1", "hit 3"])
        #expect(report.effectsDropped == 1)
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    @Test(.timeLimit(.minutes(10)))
    func anEntityWithAThrottleIntervalUnderWayIsNotQuietEnoughToPassivate() async throws {
        let group = LoopGroup<String, Timed.State, Timed.Event, Timed.Effect>(
            program: { _ in Program(first: First(state: Timed.State()), update: Update(Timed.update)) },
            effects: EffectRouter<Timed.Effect, Timed.Event>()
                .route({ $0.name }, to: ClosureEffectHandler { name, send in send(.done(name)) }),
            clock: clock
        )
        let running = Task { try await group.run() }
        group.send(.ask(.hit(1)), to: "x")
        group.send(.ask(.hit(2)), to: "x")
        await waitUntil("the first hit ran") { group.state(of: "x")?.done == ["hit 1"] }
        // Hit 2 waits for the interval: passivating now would lose it.
        #expect(!group.passivate("x") { _ in true })
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        await waitUntil("the second hit ran") { group.state(of: "x")?.done == ["hit 1", "hit 2"] }
        // Its interval is under way: a new loop would not know it, and could start two within it.
        #expect(!group.passivate("x") { _ in true })
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        await waitUntil("the interval ended and x passivated") { group.passivate("x") { _ in true } }
        group.stop()
        _ = try await running.value
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    @Test(.timeLimit(.minutes(10)))
    func aDelayAskedForAfterTheStopBeganIsCancelledNotWaitedFor() async throws {
        let gates = Gates()
        let loop = Loop(
            program: Program(first: First(state: Timed.State()), update: Update(Timed.update)),
            effects: EffectRouter<Timed.Effect, Timed.Event>()
                .route(
                    { if case .slow(let then) = $0 { then } else { nil } },
                    to: ClosureEffectHandler { then, send in
                        try await gates.pass("slow")
                        send(.ask(then))
                    }
                )
                .route({ $0.name }, to: ClosureEffectHandler { name, send in send(.done(name)) }),
            clock: clock
        )
        let running = Task { try await loop.run() }
        loop.send(.ask(.slow(then: .later("retry", by: .seconds(60)))))
        await waitUntil("the slow effect runs") { gates.arrivals("slow") == 1 }
        loop.stop(gracePeriod: .seconds(30))
        gates.open("slow")
        // The clock never moves: the retry asked for during the stop is cancelled, not waited for.
        let report = try await running.value
        #expect(report.ending == .drained)
        #expect(report.effectsCancelled == 1)
        #expect(loop.state.done.isEmpty)
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    @Test(.timeLimit(.minutes(10)))
    func aGracefulStopCancelsWhatWaitsForTimeAndDoesNotWaitForIt() async throws {
        let observed = Locked<[String]>([])
        let loop = Loop(
            program: Program(first: First(state: Timed.State()), update: Update(Timed.update)),
            effects: EffectRouter<Timed.Effect, Timed.Event>()
                .route({ $0.name }, to: ClosureEffectHandler { name, send in send(.done(name)) }),
            observer: ClosureLoopObserver { activity in
                if case .effectCancelled(let effect, _) = activity {
                    observed.withLock { $0.append(effect.name ?? "") }
                }
            },
            clock: clock
        )
        let running = Task { try await loop.run() }
        loop.send(.ask(.later("reminder", by: .seconds(60))))
        loop.send(.ask(.hit(1)))
        loop.send(.ask(.hit(2)))
        await waitUntil("the first hit ran") { loop.state.done == ["hit 1"] }
        await clock.sleepers(atLeast: 2)
        loop.stop(gracePeriod: .seconds(30))
        // The clock never moves: the stop does not wait for the delay or the interval.
        let report = try await running.value
        #expect(report.ending == .drained)
        #expect(report.effectsCancelled == 2)
        #expect(Set(observed.withLock { $0 }) == ["reminder", "hit 2"])
        #expect(loop.state.done == ["hit 1"])
    }
}
