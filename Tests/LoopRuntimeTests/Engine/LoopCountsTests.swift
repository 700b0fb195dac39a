import EffectHandlers
import LoopCore
import Testing

@testable import LoopRuntime

/// What a loop's engine keeps out of line until it needs it: the report's rarer counts and the lists of
/// those waiting on it. Each stays a value, and a loop that needs neither allocates neither.
@Suite struct LoopCountsTests {
    /// Sends `event` to a running engine and finishes its step, as the driver would.
    func send(_ event: LoopEngineTests.Ev, to engine: inout LoopEngineTests.Engine) {
        if case .step = engine.receive(event, from: .outside) { _ = engine.nextStep() }
    }

    @Test func theCountsEveryLoopMovesAllocateNothingAndMakeTheReport() {
        var counts = LoopCounts()
        counts.eventsSent += 3
        counts.eventsProcessed += 2
        counts.effectsStarted += 1
        counts.effectsCompleted += 1
        counts.effectsFailed += 0
        counts.eventsDropped = 0
        #expect(counts.rare == nil)

        var expected = LoopReport()
        expected.eventsSent = 3
        expected.eventsProcessed = 2
        expected.effectsStarted = 1
        expected.effectsCompleted = 1
        #expect(counts.report == expected)
    }

    @Test func aRareCountIsKeptWithTheOthersAndACopyKeepsItsOwn() {
        var counts = LoopCounts()
        counts.eventsSent = 5
        counts.eventsRejected += 1
        counts.ending = .drained
        let copy = counts
        counts.eventsRejected += 1
        counts.effectsTimedOut += 2

        #expect(counts.report.eventsRejected == 2 && counts.report.effectsTimedOut == 2)
        #expect(counts.report.ending == .drained && counts.report.eventsSent == 5)
        #expect(copy.report.eventsRejected == 1 && copy.report.effectsTimedOut == 0)
        #expect(copy.report.ending == .drained)
    }

    @Test func waitingListsAreAllocatedOnFirstUseAndCopiedWhenShared() {
        var waiting = EngineWaiting<Int, Int, Never>()
        #expect(waiting.lists == nil)
        waiting.unique().pendingMapped = 1
        let copy = waiting
        waiting.unique().pendingMapped = 2
        #expect(copy.lists?.pendingMapped == 1 && waiting.lists?.pendingMapped == 2)
    }

    @Test func startUpEffectsAreKeptOnlyUntilTheLoopStarts() {
        var engine = LoopEngineTests().engine()
        engine = LoopEngineTests.Engine(machine: engine.machine, settings: engine.settings, first: [.async("boot")])
        #expect(engine.waiting.lists?.firstEffects == [.async("boot")])
        guard case .started(let dispatch, _) = engine.claim(LoopEngineTests().host) else {
            Issue.record("not started")
            return
        }
        #expect(dispatch.effects == [.async("boot")])
        #expect(engine.waiting.lists == nil)
    }

    @Test func aRefusedClaimDecidesNoStartUpEffects() {
        var engine = LoopEngineTests().engine()
        engine = LoopEngineTests.Engine(machine: engine.machine, settings: engine.settings, first: [.async("boot")])
        guard case .started(let dispatch, _) = engine.claim(LoopEngineTests().host) else {
            Issue.record("not started")
            return
        }
        #expect(dispatch.effects == [.async("boot")])
        guard case .refused(.alreadyRunning) = engine.claim(LoopEngineTests().host) else {
            Issue.record("claimed twice")
            return
        }
        #expect(engine.waiting.lists == nil)
    }

    @Test func aGroupsNewLoopKeepsNoInboxBufferOnceStarted() async throws {
        let group = LoopGroup<Int, Int, Int, Never>(
            program: { _ in
                Program(
                    first: First(state: 0),
                    update: Update { total, value in
                        total += value
                        return []
                    }
                )
            },
            effects: EffectRouter()
        )
        let running = Task { try await group.run() }
        #expect(await group.waitUntilRunning())
        group.send(5, to: 1)
        let loop = group.members.withLock { $0.loop(for: 1) }
        let capacity = loop?.engine.withLock { $0.inbox.incoming.capacity + $0.inbox.outgoing.capacity }
        #expect(loop?.state == 5 && capacity == 0)
        group.stop()
        _ = try await running.value
    }

    @Test func aLoopNobodyWaitsOnKeepsNoWaitingLists() {
        var engine = LoopEngineTests().running()
        for value in 1...10 {
            send(.add(value), to: &engine)
        }
        #expect(engine.machine.state == 55 && engine.waiting.lists == nil)
        #expect(engine.counts.rare == nil && engine.report.eventsProcessed == 10)
        // Emptying a list that is not there allocates nothing either.
        engine.requests = []
        engine.pendingMapped = 0
        #expect(engine.waiting.lists == nil)
    }

    @Test func aFollowerWhoComesAfterEventsSeesTheStateAndThenEachChange() {
        var engine = LoopEngineTests().running()
        send(.add(1), to: &engine)
        engine.subscribe(1)
        guard case .state(let first) = engine.pollState(for: 1) else {
            Issue.record("no state for a new follower")
            return
        }
        #expect(first == 1)
        #expect(engine.pollState(for: 1) == nil)
        send(.add(2), to: &engine)
        guard case .state(let second) = engine.pollState(for: 1) else {
            Issue.record("no state after a change")
            return
        }
        #expect(second == 3)
    }
}
