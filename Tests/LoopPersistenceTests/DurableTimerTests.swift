import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

/// Reminders: `schedule` asks for a reminder after a delay (a timer), `cancel` cancels it, `debounce`
/// asks for one that a newer one replaces; the reminder, when due, sends `reminded` back.
enum Reminders {
    enum Event: Codable, Hashable, Sendable {
        case schedule(String, after: Duration)
        case debounce(String, quiet: Duration)
        case cancel
        case reminded(String)
    }

    enum Effect: Codable, Hashable, Sendable, ManagedEffect {
        case remind(String, after: Duration)
        case summarize(String, quiet: Duration)
        case cancelReminders

        var lifecycle: EffectLifecycle {
            switch self {
            case .remind(_, let delay): .delayed(by: delay, key: "remind")
            case .summarize(_, let quiet): .debounce("summarize", for: quiet)
            case .cancelReminders: .cancel("remind")
            }
        }
    }

    static let update = Update<[String], Event, Effect> { log, event in
        switch event {
        case .schedule(let text, let delay): return [.remind(text, after: delay)]
        case .debounce(let text, let quiet): return [.summarize(text, quiet: quiet)]
        case .cancel: return [.cancelReminders]
        case .reminded(let text):
            log.append(text)
            return []
        }
    }

    static let program = DurableProgram(initial: [String](), update: update).keepingTimers()

    /// Reminders and summarized ones come back as `reminded`; each start is counted.
    final class Router: Sendable {
        let started = Locked<[String]>([])

        var router: EffectRouter<Effect, Event> {
            EffectRouter<Effect, Event>()
                .route(
                    { effect -> String? in
                        switch effect {
                        case .remind(let text, _), .summarize(let text, _): text
                        case .cancelReminders: nil
                        }
                    },
                    to: ClosureEffectHandler { [started] text, send in
                        started.withLock { $0.append(text) }
                        send(.reminded(text))
                    }
                )
                .route({ if case .cancelReminders = $0 { () } else { nil } }, to: ClosureSyncEffectHandler { _, _ in })
        }
    }

    static func payload(_ effect: Effect) throws -> [UInt8] { try BinaryCodec<Effect>().encode(effect) }
}

typealias ReminderState = DurableState<[String], Reminders.Event, Reminders.Effect>

/// Runs `loop` until `body` returns, then stops it gracefully.
func runDurably<State: Sendable, Event: Sendable, Effect: Sendable>(
    _ loop: DurableLoop<State, Event, Effect>,
    _ body: () async throws -> Void
) async throws {
    let run = Task { try await loop.run() }
    _ = await loop.waitUntilRunning()
    try await body()
    loop.stop()
    _ = try await run.value
}

@Suite struct DurableTimerValueTests {
    let update = Reminders.program.durableUpdate(snapshotEvery: nil)

    func running() -> ReminderState {
        var durable = ReminderState(stream: "r", initial: [])
        _ = update(&durable, .recovered([], version: 0, snapshot: 0))
        return durable
    }

    /// A timer is recorded beside its event, waits once the event is recorded, is due from the record's
    /// time, and starts once: its start is recorded in a record of its own.
    @Test func aTimerIsRecordedWaitsAndStartsOnce() throws {
        var durable = running()
        let remind = Reminders.Effect.remind("tea", after: .seconds(10))
        let started = TimerNote.Started(index: 0, delay: .seconds(10), payload: .success(try Reminders.payload(remind)))
        #expect(
            update(&durable, .event(.schedule("tea", after: .seconds(10)), ticket: nil)) == [
                .append(
                    stream: "r",
                    events: [.schedule("tea", after: .seconds(10))],
                    expecting: 0,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(started: [started]))]
                )
            ]
        )
        let name = TimerName(version: 1, index: 0)
        #expect(
            update(&durable, .recorded(upTo: 1, at: .seconds(100)))
                == [.wait(name, lifecycle: .delayed(by: .seconds(10), key: "remind"))]
        )
        #expect(durable.timers.map(\.due) == [.seconds(110)])
        #expect(
            update(&durable, .timerDue(name)) == [
                .effect(
                    remind,
                    key: IdempotencyKey(stream: "r", version: 1, index: 0),
                    lifecycle: .concurrent("remind")
                ),
                .append(
                    stream: "r",
                    events: [],
                    expecting: 1,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(fired: [name]))]
                ),
            ]
        )
        #expect(durable.timers.isEmpty)
        // Due again (a second wait that was not ended): it started already.
        #expect(update(&durable, .timerDue(name)).isEmpty)
        #expect(update(&durable, .recorded(upTo: 2)).isEmpty)
        #expect(durable.version == 2)
        #expect(durable.isQuiet)
    }

    /// A timer's start rides with the events of the next record when there are some.
    @Test func aTimersStartIsRecordedWithTheNextEvents() {
        var durable = running()
        _ = update(&durable, .event(.schedule("tea", after: .seconds(1)), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .zero))
        // An append is under way when the timer is due: the start waits for the next batch.
        _ = update(&durable, .event(.reminded("other"), ticket: nil))
        let name = TimerName(version: 1, index: 0)
        let effects = update(&durable, .timerDue(name))
        #expect(effects.count == 1)
        _ = update(&durable, .event(.reminded("tea"), ticket: nil))
        #expect(
            update(&durable, .recorded(upTo: 2)) == [
                .append(
                    stream: "r",
                    events: [.reminded("tea")],
                    expecting: 2,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(fired: [name]))]
                )
            ]
        )
    }

    /// A cancel applied before the timer's event is recorded ends it: it never waits, and the end is
    /// recorded with the cancel.
    @Test func aTimerEndedByALaterEventNeverWaits() {
        var durable = running()
        _ = update(&durable, .event(.schedule("tea", after: .seconds(10)), ticket: nil))
        // The schedule is being appended; the cancel is applied meanwhile.
        #expect(update(&durable, .event(.cancel, ticket: nil)).isEmpty)
        #expect(durable.timers.isEmpty)
        let released = update(&durable, .recorded(upTo: 1, at: .zero))
        #expect(!released.contains { if case .wait = $0 { true } else { false } })
        #expect(
            released == [
                .append(
                    stream: "r",
                    events: [.cancel],
                    expecting: 1,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(ended: [TimerName(version: 1, index: 0)]))]
                )
            ]
        )
        // The wait a running loop had (had it been let in) is of no consequence: it is not kept.
        #expect(update(&durable, .timerDue(TimerName(version: 1, index: 0))).isEmpty)
    }

    /// A newer debounce of a key ends the one waiting; once due it starts as `latest`.
    @Test func aNewerDebounceEndsTheOneWaiting() {
        var durable = running()
        _ = update(&durable, .event(.debounce("a", quiet: .seconds(5)), ticket: nil))
        #expect(
            update(&durable, .recorded(upTo: 1, at: .zero))
                == [.wait(TimerName(version: 1, index: 0), lifecycle: .debounce("summarize", for: .seconds(5)))]
        )
        let effects = update(&durable, .event(.debounce("b", quiet: .seconds(5)), ticket: nil))
        guard case .append(_, _, _, _, let notes, _, _, _)? = effects.first else {
            Issue.record("no append: \(effects)")
            return
        }
        #expect(notes[0]?.timers.ended == [TimerName(version: 1, index: 0)])
        #expect(durable.timers.map(\.name) == [TimerName(version: 2, index: 0)])
        _ = update(&durable, .recorded(upTo: 2, at: .seconds(1)))
        #expect(
            update(&durable, .timerDue(TimerName(version: 2, index: 0))).first
                == .effect(
                    .summarize("b", quiet: .seconds(5)),
                    key: IdempotencyKey(stream: "r", version: 2, index: 0),
                    lifecycle: .concurrent("summarize")
                )
        )
    }

    /// Recovered timers wait what is left of them; one due during the outage waits nothing.
    @Test func recoveredTimersWaitWhatIsLeft() throws {
        var durable = ReminderState(stream: "r", initial: [])
        let late = RecordedTimer(
            version: 1,
            index: 0,
            payload: try Reminders.payload(.remind("late", after: .seconds(10))),
            delay: .seconds(10),
            due: .seconds(50)
        )
        let later = RecordedTimer(
            version: 2,
            index: 0,
            payload: try Reminders.payload(.remind("later", after: .seconds(60))),
            delay: .seconds(60),
            due: .seconds(130)
        )
        let effects = update(
            &durable,
            .recovered([], version: 2, snapshot: 0, timers: [late, later], now: .seconds(100))
        )
        #expect(
            effects == [
                .wait(late.name, lifecycle: .delayed(by: .zero, key: "remind")),
                .wait(later.name, lifecycle: .delayed(by: .seconds(30), key: "remind")),
            ]
        )
        #expect(durable.timers.map(\.due) == [.seconds(50), .seconds(130)])
    }

    /// A recovered timer whose effect no longer decodes stops the loop, naming it.
    @Test func aRecoveredTimerThatDoesNotDecodeStopsTheLoop() {
        var durable = ReminderState(stream: "r", initial: [])
        let broken = RecordedTimer(version: 1, index: 0, payload: [0xFF], delay: .seconds(1), due: .zero)
        let effects = update(&durable, .recovered([], version: 1, snapshot: 0, timers: [broken]))
        guard case .failed(let reason) = durable.phase else {
            Issue.record("the loop runs on: \(effects)")
            return
        }
        #expect(reason.description.contains("@1#0"))
        #expect(effects.last == .stop)
    }

    /// A snapshot carries the timers waiting.
    @Test func aSnapshotCarriesTheTimersWaiting() {
        let update = Reminders.program.durableUpdate(snapshotEvery: 2)
        var durable = ReminderState(stream: "r", initial: [])
        _ = update(&durable, .recovered([], version: 0, snapshot: 0))
        _ = update(&durable, .event(.schedule("a", after: .seconds(5)), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .seconds(1)))
        let effects = update(&durable, .event(.schedule("b", after: .seconds(7)), ticket: nil))
        guard case .append(_, _, _, let snapshot, _, _, let timers, _)? = effects.first else {
            Issue.record("no append: \(effects)")
            return
        }
        #expect(snapshot != nil)
        #expect(timers?.map(\.name) == [TimerName(version: 1, index: 0), TimerName(version: 2, index: 0)])
        // The first is due from its record; the second's due time is set when its record is written.
        #expect(timers?.map(\.due) == [.seconds(6), nil])
    }
}

@Suite struct DurableTimerLoopTests {
    func loop(
        _ store: any EventStore,
        _ clock: ManualClock,
        _ reminders: Reminders.Router,
        snapshotEvery: UInt64? = nil
    ) -> DurableLoop<[String], Reminders.Event, Reminders.Effect> {
        DurableLoop(
            stream: "r",
            program: Reminders.program,
            effects: reminders.router,
            store: store,
            snapshotEvery: snapshotEvery,
            clock: clock
        )
    }

    func running(
        _ loop: DurableLoop<[String], Reminders.Event, Reminders.Effect>,
        _ body: () async throws -> Void
    ) async throws {
        try await runDurably(loop, body)
    }

    /// A timer outlives a stop: the next run waits what is left of it, then starts it once; a later run
    /// does not start it again.
    @Test func aTimerOutlivesARestartAndStartsOnce() async throws {
        let (store, clock, reminders) = (InMemoryEventStore(), ManualClock(), Reminders.Router())
        let first = loop(store, clock, reminders)
        try await running(first) {
            _ = try await first.sendDurably(.schedule("tea", after: .seconds(10)))
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(4))
        }
        #expect(reminders.started.withLock { $0 }.isEmpty)
        let second = loop(store, clock, reminders)
        try await running(second) {
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(5))
            #expect(second.state.isEmpty)
            clock.advance(by: .seconds(1))
            await eventually("the reminder to be recorded") {
                second.state == ["tea"] && second.underlying.state.isQuiet
            }
        }
        let third = loop(store, clock, reminders)
        try await running(third) {
            _ = try await third.durableState()
            #expect(third.underlying.state.timers.isEmpty)
        }
        #expect(third.state == ["tea"])
        #expect(reminders.started.withLock { $0 } == ["tea"])
    }

    /// A timer due while no loop ran starts as soon as the next one has recovered, once.
    @Test func aTimerDueDuringAnOutageStartsAtOnce() async throws {
        let (store, clock, reminders) = (InMemoryEventStore(), ManualClock(), Reminders.Router())
        let first = loop(store, clock, reminders)
        try await running(first) { _ = try await first.sendDurably(.schedule("tea", after: .seconds(10))) }
        clock.advance(by: .seconds(3_600))
        let second = loop(store, clock, reminders)
        try await running(second) {
            await eventually("the reminder to be recorded") {
                second.state == ["tea"] && second.underlying.state.isQuiet
            }
        }
        #expect(reminders.started.withLock { $0 } == ["tea"])
    }

    /// A timer cancelled by a later event never starts, before or after a restart.
    @Test func aCancelledTimerNeverStartsAfterARestart() async throws {
        let (store, clock, reminders) = (InMemoryEventStore(), ManualClock(), Reminders.Router())
        let first = loop(store, clock, reminders)
        try await running(first) {
            _ = try await first.sendDurably(.schedule("tea", after: .seconds(10)))
            _ = try await first.sendDurably(.cancel)
        }
        clock.advance(by: .seconds(60))
        let second = loop(store, clock, reminders)
        try await running(second) {
            _ = try await second.durableState()
            #expect(second.underlying.state.timers.isEmpty)
        }
        #expect(reminders.started.withLock { $0 }.isEmpty)
        #expect(second.state.isEmpty)
    }

    /// A snapshot taken while a timer waits carries it: recovery from the snapshot alone re-arms it.
    @Test func aSnapshotCarriesATimerAcrossARestart() async throws {
        let (store, clock, reminders) = (InMemoryEventStore(), ManualClock(), Reminders.Router())
        let first = loop(store, clock, reminders, snapshotEvery: 1)
        try await running(first) {
            _ = try await first.sendDurably(.schedule("tea", after: .seconds(10)))
            await eventually("the snapshot to be saved") { first.storeWork.snapshotsSaved == 1 }
        }
        let snapshot = try #require(try await store.latestSnapshot(of: "r"))
        #expect(snapshot.version == 1)
        clock.advance(by: .seconds(10))
        let second = loop(store, clock, reminders)
        try await running(second) {
            await eventually("the reminder to be recorded") {
                second.state == ["tea"] && second.underlying.state.isQuiet
            }
        }
        #expect(reminders.started.withLock { $0 } == ["tea"])
    }
}
