import EffectHandlers
import LoopCore
import Testing

@testable import LoopRuntime

/// The engine as a value: a sequence of inputs in, the returned actions out, one `#expect` each. Every
/// transition of ``LoopEngine/Phase`` is here (created, running, stopping, stopped, with and without
/// the drain baton), with every inbox policy and every effect lifecycle.
@Suite struct LoopEngineTests {
    /// An effect: synchronous or not, scheduled by its own lifecycle.
    struct Fx: Equatable, Sendable, ManagedEffect {
        var name: String
        var lifecycle: EffectLifecycle = .concurrent()
        var sync = false

        static func async(_ name: String, _ lifecycle: EffectLifecycle = .concurrent()) -> Fx {
            Fx(name: name, lifecycle: lifecycle)
        }
        static func sync(_ name: String) -> Fx { Fx(name: name, sync: true) }
    }

    enum Ev: Equatable, Sendable {
        case add(Int)
        case emit([Fx])
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String { "failure" }
    }

    typealias Engine = LoopEngine<Int, Ev, Fx>

    static func update(_ total: inout Int, _ event: Ev) -> [Fx] {
        switch event {
        case .add(let value):
            total += value
            return []
        case .emit(let effects):
            return effects
        }
    }

    static let router = EffectRouter<Fx, Ev>()
        .route({ $0.sync ? nil : $0 }, to: ClosureEffectHandler { _, _ in })
        .route({ $0.sync ? $0 : nil }, to: ClosureSyncEffectHandler { _, _ in })
        .mapErrors { effect, _ in effect.name == "mapped" ? .add(100) : nil }

    func engine(_ policy: InboxPolicy = .unbounded, observed: Bool = false) -> Engine {
        Engine(
            machine: Machine(state: 0, update: Update(Self.update)),
            router: Self.router,
            policy: policy,
            timed: observed
        )
    }

    let host = Host(clock: ContinuousClock())

    /// A running engine whose baton nobody holds.
    func running(_ policy: InboxPolicy = .unbounded, observed: Bool = false) -> Engine {
        var engine = engine(policy, observed: observed)
        _ = engine.claim(host, first: [])
        _ = engine.nextStep()
        return engine
    }

    func step(
        _ event: Ev,
        origin: EventOrigin = .outside,
        effects: [Fx] = [],
        first: UInt64 = 0,
        decisions: [Decision<Fx, Ev>] = [],
        depth: Int = 0
    )
        -> Step<Int, Ev, Fx>
    {
        Step(
            event: event,
            origin: origin,
            dispatch: Dispatch(
                effects: effects,
                firstID: first,
                decisions: decisions,
                host: decisions.isEmpty ? nil : host
            ),
            duration: nil,
            inboxDepth: depth
        )
    }

    func admitted(_ id: UInt64, _ effect: Fx) -> Admitted<Fx, Ev> {
        Admitted(id: id, effect: effect, lifecycle: effect.lifecycle) { _, _ in }
    }

    func start(
        _ id: UInt64,
        _ effect: Fx,
        cancelling: [UInt64] = [],
        cancelled: [(UInt64, Fx)] = []
    ) -> Admission<Fx, Ev> {
        .start(
            admitted(id, effect),
            cancelling: cancelling.map { CancelHandle(id: $0) {} },
            cancelled: cancelled.map { IdentifiedEffect($0, $1) }
        )
    }

    func finish(
        _ ending: LoopReport.Ending,
        host: Host?,
        dropped: [Ev] = [],
        cancelled: [(UInt64, Fx)] = [],
        abandoned: [(UInt64, Fx)] = []
    )
        -> Finish<Int, Ev, Fx>
    {
        var finish = Finish<Int, Ev, Fx>(ending: ending, host: host)
        finish.dropped = dropped
        finish.cancelled = cancelled.map { IdentifiedEffect($0, $1) }
        finish.abandoned = abandoned.map { IdentifiedEffect($0, $1) }
        return finish
    }

    // MARK: created

    @Test func aCreatedLoopQueuesEventsAndProcessesNothing() {
        var engine = engine()
        let action1 = engine.receive(.add(1), from: .outside)
        #expect(action1 == .queued)
        #expect(engine.machine.state == 0 && engine.phase == .created && engine.report.eventsSent == 1)
    }

    @Test func claimingACreatedLoopHandsTheClaimerTheBatonAndTheStartUpEffects() {
        var engine = engine()
        let action2 = engine.claim(host, first: [.async("boot")])
        #expect(
            action2
                == .started(
                    Dispatch(
                        effects: [.async("boot")],
                        firstID: 1,
                        decisions: [Decision(0, start(1, .async("boot")))],
                        host: host
                    ),
                    startWaiters: []
                )
        )
        #expect(engine.phase == .running(host, draining: true))
    }

    @Test func theClaimerThenProcessesWhatWasQueuedInOrder() {
        var engine = engine()
        _ = engine.receive(.add(1), from: .outside)
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.claim(host, first: [])
        let action3 = engine.nextStep()
        #expect(action3 == .step(step(.emit([.sync("s")]), effects: [.sync("s")], first: 1)))
        let action4 = engine.nextStep()
        #expect(action4 == .idle)
        #expect(engine.machine.state == 1 && engine.phase == .running(host, draining: false))
    }

    @Test func synchronousEffectsThatEndedOutsideTheLockAreCountedAtTheNextStep() {
        var engine = engine()
        _ = engine.receive(.emit([.sync("a"), .sync("b"), .sync("c")]), from: .outside)
        _ = engine.claim(host, first: [])
        _ = engine.nextStep()
        var tally = SyncTally()
        tally.count(completed: true)
        tally.count(completed: true)
        tally.count(completed: false)
        let before = engine.report
        let action = engine.nextStep(counting: tally)
        #expect(action == .idle)
        #expect(engine.report.effectsStarted == before.effectsStarted + 3)
        #expect(engine.report.effectsCompleted == before.effectsCompleted + 2)
        #expect(engine.report.effectsFailed == before.effectsFailed + 1)
    }

    @Test func stoppingALoopThatNeverRanDropsWhatItQueued() {
        var engine = engine()
        _ = engine.receive(.add(1), from: .outside)
        let action5 = engine.stop()
        #expect(action5 == .finished(finish(.neverStarted, host: nil, dropped: [.add(1)])))
        #expect(engine.phase == .stopped(.neverStarted) && engine.report.eventsDropped == 1)
    }

    @Test func aStartWaiterParksUntilTheClaimAndLearnsOfAStopBeforeRunning() async {
        var engine = engine()
        let started = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let action6 = engine.waitForStart(1, continuation)
            #expect(action6 == nil)
            if case .started(_, let waiters) = engine.claim(host, first: []) {
                for waiter in waiters { waiter.resume(returning: true) }
            }
        }
        #expect(started)
        var created = self.engine()
        _ = created.stop()
        let known = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            continuation.resume(returning: created.waitForStart(2, continuation) ?? true)
        }
        #expect(known == false)
    }

    // MARK: running

    @Test func aRunningLoopCannotBeClaimedAgainNorAStoppedOne() {
        var engine = running()
        let action7 = engine.claim(host, first: [])
        #expect(action7 == .refused(.alreadyRunning))
        _ = engine.stop()
        let action8 = engine.claim(host, first: [])
        #expect(action8 == .refused(.alreadyStopped))
    }

    @Test func anEventThatFindsNobodyDrainingIsProcessedInsideTheLock() {
        var engine = running()
        let action9 = engine.receive(.add(2), from: .outside)
        #expect(action9 == .processed)
        #expect(engine.machine.state == 2 && engine.phase == .running(host, draining: false))
    }

    @Test func anEventWithEffectsHandsTheCallerTheBaton() {
        var engine = running()
        let action10 = engine.receive(.emit([.sync("s")]), from: .source)
        #expect(action10 == .step(step(.emit([.sync("s")]), origin: .source, effects: [.sync("s")], first: 1)))
        #expect(engine.phase == .running(host, draining: true))
    }

    @Test func anObservedLoopReportsEveryEventAsAStep() {
        var engine = running(observed: true)
        guard case .step(let processed) = engine.receive(.add(1), from: .outside) else {
            Issue.record("expected a step")
            return
        }
        #expect(processed.duration != nil)
    }

    @Test func eventsSentWhileSomeoneDrainsAreQueuedAndProcessedByTheDrainer() {
        var engine = running()
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        let action11 = engine.receive(.add(1), from: .effect)
        #expect(action11 == .queued)
        let action12 = engine.nextStep()
        #expect(action12 == .idle)
        #expect(engine.machine.state == 1)
    }

    @Test func theDrainerYieldsTheLockEveryBatch() {
        var engine = running()
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        for _ in 0..<(Engine.batchLimit + 1) { _ = engine.receive(.add(1), from: .outside) }
        let action13 = engine.nextStep()
        #expect(action13 == .again)
        let action14 = engine.nextStep()
        #expect(action14 == .idle)
        #expect(engine.machine.state == Engine.batchLimit + 1)
    }

    // MARK: inbox policies

    @Test func aFullRejectingInboxTurnsTheNewestAway() {
        var engine = running(.bounded(1, whenFull: .rejectNewest))
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        let action15 = engine.receive(.add(2), from: .outside)
        #expect(action15 == .rejected(.inboxFull))
    }

    @Test func aFullDroppingInboxDropsTheOldest() {
        var engine = running(.bounded(1, whenFull: .dropOldest))
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        let action16 = engine.receive(.add(2), from: .outside)
        #expect(action16 == .droppedOldest(.add(1)))
        #expect(engine.report.eventsDropped == 1)
    }

    @Test func aFullSuspendingInboxParksAsyncSendersAndAdmitsThemAsRoomFrees() async {
        var engine = running(.bounded(1, whenFull: .suspendSender))
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        #expect(engine.mustWait())
        let action17 = engine.receive(.add(5), from: .outside)
        #expect(action17 == .rejected(.inboxFull))
        let delivery = await withCheckedContinuation { (continuation: CheckedContinuation<Delivery, Never>) in
            engine.park((7, .add(2), .outside, nil, continuation))
            guard case .step(let admitting) = engine.nextStep() else {
                return continuation.resume(returning: .rejected(.stopped))
            }
            admitting.wakeups?.resume()
        }
        #expect(delivery == .accepted)
        let action18 = engine.nextStep()
        #expect(action18 == .idle)
        #expect(engine.machine.state == 3)
    }

    @Test func aParkedSenderThatGivesUpIsCountedRejected() async {
        var engine = running(.bounded(1, whenFull: .suspendSender))
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        let delivery = await withCheckedContinuation { (continuation: CheckedContinuation<Delivery, Never>) in
            engine.park((7, .add(2), .outside, nil, continuation))
            engine.removeWaitingSender(7)?.resume(returning: .rejected(.inboxFull))
        }
        #expect(delivery == .rejected(.inboxFull))
        #expect(engine.report.eventsRejected == 1 && engine.waitingSenders.isEmpty)
    }

    // MARK: stopping

    @Test func stoppingARunningLoopWithNothingLeftFinishesAtOnce() {
        var engine = running()
        let action19 = engine.stop()
        #expect(action19 == .stopping(host, senders: [], finish: finish(.drained, host: host)))
        #expect(engine.phase == .stopped(.drained))
    }

    @Test func stoppingWhileSomeoneDrainsFinishesWhenTheDrainEnds() {
        var engine = running()
        _ = engine.receive(.emit([.sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        let action20 = engine.stop()
        #expect(action20 == .stopping(host, senders: [], finish: nil))
        #expect(engine.phase == .stopping(host, draining: true))
        let action21 = engine.nextStep()
        #expect(action21 == .finished(finish(.drained, host: host)))
        #expect(engine.machine.state == 1 && engine.report.eventsQueued == 0)
    }

    @Test func aStoppingLoopTakesEffectResultsButNothingFromOutside() {
        var engine = running()
        _ = engine.receive(.emit([.async("a")]), from: .outside)
        _ = engine.nextStep()
        _ = engine.stop()
        let action22 = engine.receive(.add(1), from: .outside)
        #expect(action22 == .rejected(.stopping))
        let action23 = engine.receive(.add(1), from: .source)
        #expect(action23 == .rejected(.stopping))
        let action24 = engine.receive(.add(1), from: .effect)
        #expect(action24 == .step(step(.add(1), origin: .effect)))
        #expect(engine.phase == .stopping(host, draining: true))
    }

    @Test func aStoppingLoopFinishesWhenItsLastEffectEnds() {
        var engine = running()
        _ = engine.receive(.emit([.async("a")]), from: .outside)
        _ = engine.nextStep()
        _ = engine.stop()
        let action25 = engine.end(admitted(1, .async("a")), .completed)
        #expect(
            action25
                == Engine.EffectEnd(
                    id: 1,
                    effect: .async("a"),
                    outcome: .completed,
                    mapped: nil,
                    next: nil,
                    finish: finish(.drained, host: host)
                )
        )
    }

    @Test func aMappedErrorHoldsTheShutdownUntilItsEventIsDelivered() {
        var engine = running()
        _ = engine.receive(.emit([.async("mapped")]), from: .outside)
        _ = engine.nextStep()
        _ = engine.stop()
        let action26 = engine.end(admitted(1, .async("mapped")), .failed(Failure()))
        #expect(
            action26
                == Engine.EffectEnd(
                    id: 1,
                    effect: .async("mapped"),
                    outcome: .failed(Failure()),
                    mapped: .add(100),
                    next: nil,
                    finish: nil
                )
        )
        let (reception, finished) = engine.receiveMapped(.add(100))
        #expect(reception == .step(step(.add(100), origin: .effect)))
        #expect(finished == nil)
        let action27 = engine.nextStep()
        #expect(action27 == .finished(finish(.drained, host: host)))
    }

    @Test func stoppingAgainOnlyHandsBackTheHostForAShorterGracePeriod() {
        var engine = running()
        _ = engine.receive(.emit([.async("a")]), from: .outside)
        _ = engine.stop()
        let action28 = engine.stop()
        #expect(action28 == .alreadyStopping(host))
        #expect(engine.phase == .stopping(host, draining: true))
    }

    @Test func theDeadlineDropsWhatIsQueuedAndAbandonsWhatRuns() {
        var engine = running()
        _ = engine.receive(.emit([.async("a"), .sync("s")]), from: .outside)
        _ = engine.receive(.add(1), from: .outside)
        _ = engine.stop()
        let action29 = engine.abandon(.deadlineExceeded)
        #expect(action29 == finish(.deadlineExceeded, host: host, dropped: [.add(1)]))
        #expect(engine.report.effectsAbandoned == 1 && engine.report.eventsDropped == 1)
        #expect(engine.phase == .stopped(.deadlineExceeded))
    }

    @Test func anObservedLoopNamesEachAbandonedEffect() {
        var engine = running(observed: true)
        _ = engine.receive(.emit([.async("a")]), from: .outside)
        _ = engine.nextStep()
        let action30 = engine.abandon(.cancelled)
        #expect(action30 == finish(.cancelled, host: host, abandoned: [(1, .async("a"))]))
    }

    // MARK: stopped

    @Test func aStoppedLoopTakesNothingAndExpiresNoMore() {
        var engine = running()
        _ = engine.stop()
        let action31 = engine.receive(.add(1), from: .effect)
        #expect(action31 == .rejected(.stopped))
        let action32 = engine.abandon(.cancelled)
        #expect(action32 == nil)
        let action33 = engine.stop()
        #expect(action33 == .none)
        let action34 = engine.end(admitted(9, .async("late")), .completed)
        #expect(action34 == nil)
    }

    @Test func cancellingTheRunTaskStopsAtOnceFromAnyLivePhase() {
        var running = running()
        let action35 = running.abandon(.cancelled)
        #expect(action35 == finish(.cancelled, host: host))
        var stopping = self.running()
        _ = stopping.receive(.emit([.async("a")]), from: .outside)
        _ = stopping.nextStep()
        _ = stopping.stop()
        let action36 = stopping.abandon(.cancelled)
        #expect(action36 == finish(.cancelled, host: host))
        #expect(stopping.report.effectsAbandoned == 1)
    }

    // MARK: effects

    @Test func asyncEffectsAreDecidedInTheSameHoldAsTheUpdateAndSyncOnesAreLeftInline() {
        var engine = running()
        let action37 = engine.receive(.emit([.sync("s"), .async("a")]), from: .outside)
        #expect(
            action37
                == .step(
                    step(
                        .emit([.sync("s"), .async("a")]),
                        effects: [.sync("s"), .async("a")],
                        first: 1,
                        // Every effect the update returned has an id, the synchronous one too.
                        decisions: [Decision(1, start(2, .async("a")))]
                    )
                )
        )
        #expect(engine.report.effectsStarted == 1)
    }

    @Test func aSerialEffectWaitsForTheOneWithItsKeyAndStartsWhenItEnds() {
        var engine = running()
        let first = Fx.async("one", .serial("k"))
        let second = Fx.async("two", .serial("k"))
        _ = engine.receive(.emit([first, second]), from: .outside)
        _ = engine.nextStep()
        let action38 = engine.begin(1, cancel: CancelHandle(id: 1) {})
        #expect(action38)
        let action39 = engine.end(admitted(1, first), .completed)
        #expect(
            action39
                == Engine.EffectEnd(
                    id: 1,
                    effect: first,
                    outcome: .completed,
                    mapped: nil,
                    next: Dispatch(
                        effects: [second],
                        firstID: 2,
                        decisions: [Decision(0, start(2, second))],
                        host: host
                    ),
                    finish: nil
                )
        )
    }

    @Test func aLatestEffectCancelsTheRunningOneAndTheQueuedOnes() {
        var engine = running()
        let old = Fx.async("old", .latest("k"))
        _ = engine.receive(.emit([old]), from: .outside)
        _ = engine.nextStep()
        let action40 = engine.begin(1, cancel: CancelHandle(id: 1) {})
        #expect(action40)
        let new = Fx.async("new", .latest("k"))
        let action41 = engine.receive(.emit([new]), from: .outside)
        #expect(
            action41
                == .step(
                    step(
                        .emit([new]),
                        effects: [new],
                        first: 2,
                        decisions: [Decision(0, start(2, new, cancelling: [1]))]
                    )
                )
        )
        let action42 = engine.end(admitted(1, old), .completed)
        #expect(action42?.outcome == .cancelled)
    }

    @Test func anEffectCancelledBeforeItBeganNeverRunsAndCountsAsCancelledOnly() {
        var engine = running()
        let first = Fx.async("first", .latest("k"))
        let second = Fx.async("second", .latest("k"))
        _ = engine.receive(.emit([first, second]), from: .outside)
        let action43 = engine.begin(1, cancel: CancelHandle(id: 1) {})
        #expect(action43 == false)
        _ = engine.end(admitted(1, first), .cancelled)
        #expect(engine.report.effectsStarted == 0 && engine.report.effectsCancelled == 1)
    }

    @Test func aDropIfRunningEffectIsDroppedWhileOneWithItsKeyRuns() {
        var engine = running()
        let effect = Fx.async("d", .dropIfRunning("k"))
        _ = engine.receive(.emit([effect, effect]), from: .outside)
        let action44 = engine.nextStep()
        #expect(action44 == .idle)
        #expect(engine.report.effectsDropped == 1)
    }

    @Test func aCancelEffectCancelsItsKeyAndStartsNothing() {
        var engine = running()
        let queued = Fx.async("q", .serial("k"))
        _ = engine.receive(.emit([queued, queued]), from: .outside)
        _ = engine.nextStep()
        let cancel = Fx.async("c", .cancel("k"))
        let action45 = engine.receive(.emit([cancel]), from: .outside)
        #expect(
            action45
                == .step(
                    step(
                        .emit([cancel]),
                        effects: [cancel],
                        first: 3,
                        decisions: [Decision(0, .cancel(cancelling: [], cancelled: [IdentifiedEffect(2, queued)]))]
                    )
                )
        )
    }

    @Test func aTimedOutEffectEndsAtTheTimeoutAndItsLateEventsAreTurnedAway() {
        var engine = running()
        let timed = Fx.async("t", .concurrent(timeout: .seconds(1)))
        _ = engine.receive(.emit([timed]), from: .outside)
        _ = engine.nextStep()
        let action46 = engine.begin(1, cancel: CancelHandle(id: 1) {})
        #expect(action46)
        let timing = engine.timeOut(1, after: .seconds(1), handlerRunning: true)
        #expect(
            timing?.0
                == Engine.EffectEnd(
                    id: 1,
                    effect: timed,
                    outcome: .timedOut(.seconds(1)),
                    mapped: nil,
                    next: nil,
                    finish: nil
                )
        )
        #expect(timing?.1 == CancelHandle(id: 1) {})
        let action47 = engine.receive(.add(1), fromEffect: 1)
        #expect(action47 == .rejected(.effectEnded))
        let action48 = engine.end(admitted(1, timed), .completed)
        #expect(action48 == nil)
        #expect(engine.effects.stragglers == [1])
        let action49 = engine.abandon(.deadlineExceeded)
        #expect(action49 != nil && engine.report.timedOutStillRunning == 1)
    }

    @Test func anEffectAskedToCancelThatOutlivesItsTimeoutEndsCancelledAndFreesItsKey() {
        var engine = running()
        let first = Fx.async("first", .serial("k", timeout: .seconds(1)))
        let second = Fx.async("second", .serial("k"))
        _ = engine.receive(.emit([first, second]), from: .outside)
        _ = engine.nextStep()
        _ = engine.begin(1, cancel: CancelHandle(id: 1) {})
        let cancel = Fx.async("cancel", .cancel("k"))
        _ = engine.receive(.emit([cancel]), from: .outside)
        let timing = engine.timeOut(1, after: .seconds(1), handlerRunning: true)
        #expect(timing?.0.outcome == .cancelled)
        #expect(timing?.0.next == nil)
        #expect(engine.effects.isEmpty && engine.effects.stragglers == [1])
        #expect(engine.report.effectsCancelled == 2 && engine.report.effectsTimedOut == 0)
    }
}
