import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

@testable import LoopPersistence

/// Pings: each `ping` asks for a notification, throttled to one per 10 seconds (a newer one asked for
/// within the interval waits for its end and replaces the one waiting); `pingOnce` asks for one that
/// is dropped within its interval; `quiet` cancels the notification waiting. A notification, once
/// started, sends `notified` back.
enum Pings {
    enum Event: Codable, Hashable, Sendable {
        case ping(String)
        case pingOnce(String)
        case quiet
        case notified(String)
    }

    enum Effect: Codable, Hashable, Sendable, ManagedEffect {
        case notify(String)
        case notifyOnce(String)
        case quiet

        var lifecycle: EffectLifecycle {
            switch self {
            case .notify: .throttle("notify", every: .seconds(10))
            case .notifyOnce: .throttle("once", every: .seconds(10), latest: false)
            case .quiet: .cancel("notify")
            }
        }
    }

    static let update = Update<[String], Event, Effect> { log, event in
        switch event {
        case .ping(let text): return [.notify(text)]
        case .pingOnce(let text): return [.notifyOnce(text)]
        case .quiet: return [.quiet]
        case .notified(let text):
            log.append(text)
            return []
        }
    }

    static let program = DurableProgram(initial: [String](), update: update).keepingTimers()

    /// Notifications come back as `notified`; each start is counted.
    final class Router: Sendable {
        let started = Locked<[String]>([])

        var router: EffectRouter<Effect, Event> {
            EffectRouter<Effect, Event>()
                .route(
                    { effect -> String? in
                        switch effect {
                        case .notify(let text), .notifyOnce(let text): text
                        case .quiet: nil
                        }
                    },
                    to: ClosureEffectHandler { [started] text, send in
                        started.withLock { $0.append(text) }
                        send(.notified(text))
                    }
                )
                .route({ if case .quiet = $0 { () } else { nil } }, to: ClosureSyncEffectHandler { _, _ in })
        }
    }

    static func payload(_ effect: Effect) throws -> [UInt8] { try BinaryCodec<Effect>().encode(effect) }
}

typealias PingState = DurableState<[String], Pings.Event, Pings.Effect>

@Suite struct DurableThrottleValueTests {
    let update = Pings.program.durableUpdate(snapshotEvery: nil)
    let interval = EffectLifecycle.delayed(by: .seconds(10))

    func running() -> PingState {
        var durable = PingState(stream: "p", initial: [])
        _ = update(&durable, .recovered([], version: 0, snapshot: 0))
        return durable
    }

    func started(_ effect: Pings.Effect, _ kind: TimerKind) throws -> TimerNote.Started {
        TimerNote.Started(index: 0, delay: .seconds(10), payload: .success(try Pings.payload(effect)), kind: kind)
    }

    /// The first throttled effect opens its key's interval, recorded as a window beside its event; once
    /// the event is recorded, the effect starts (under its key, no longer throttled) and the interval
    /// waits.
    @Test func theFirstThrottledEffectStartsAndOpensAnInterval() throws {
        var durable = running()
        #expect(
            update(&durable, .event(.ping("a"), ticket: nil)) == [
                .append(
                    stream: "p",
                    events: [.ping("a")],
                    expecting: 0,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(started: [try started(.notify("a"), .window)]))]
                )
            ]
        )
        let name = TimerName(version: 1, index: 0)
        #expect(
            update(&durable, .recorded(upTo: 1, at: .seconds(100))) == [
                .effect(
                    .notify("a"),
                    key: IdempotencyKey(stream: "p", version: 1, index: 0),
                    lifecycle: .concurrent("notify")
                ),
                .wait(name, lifecycle: interval),
            ]
        )
        #expect(durable.timers.map(\.kind) == [.window])
        #expect(durable.timers.map(\.due) == [.seconds(110)])
    }

    /// Within the interval, an effect is held (recorded as such, started by nothing); a newer one
    /// replaces it, and the replacement is recorded as the end of the one held.
    @Test func anEffectWithinTheIntervalIsHeldAndANewerOneReplacesIt() throws {
        var durable = running()
        _ = update(&durable, .event(.ping("a"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .seconds(100)))
        #expect(
            update(&durable, .event(.ping("b"), ticket: nil)) == [
                .append(
                    stream: "p",
                    events: [.ping("b")],
                    expecting: 1,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(started: [try started(.notify("b"), .held)]))]
                )
            ]
        )
        #expect(update(&durable, .recorded(upTo: 2, at: .seconds(101))).isEmpty)
        let effects = update(&durable, .event(.ping("c"), ticket: nil))
        guard case .append(_, _, _, _, let notes, _, _, _)? = effects.first else {
            Issue.record("no append: \(effects)")
            return
        }
        #expect(notes[0]?.timers.ended == [TimerName(version: 2, index: 0)])
        #expect(notes[0]?.timers.started.map(\.kind) == [.held])
        #expect(durable.droppedEffects == 1)
        #expect(update(&durable, .recorded(upTo: 3, at: .seconds(102))).isEmpty)
        #expect(durable.timers.map(\.name) == [TimerName(version: 1, index: 0), TimerName(version: 3, index: 0)])
    }

    /// The interval's end starts the effect held for it, which opens the next interval: the record says
    /// both (the window fired, the held effect renewed), and the next interval is due from that
    /// record's time.
    @Test func theIntervalsEndStartsTheHeldEffectAndOpensTheNext() {
        var durable = running()
        _ = update(&durable, .event(.ping("a"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .seconds(100)))
        _ = update(&durable, .event(.ping("b"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 2, at: .seconds(104)))
        let window = TimerName(version: 1, index: 0)
        let held = TimerName(version: 2, index: 0)
        #expect(
            update(&durable, .timerDue(window)) == [
                .effect(
                    .notify("b"),
                    key: IdempotencyKey(stream: "p", version: 2, index: 0),
                    lifecycle: .concurrent("notify")
                ),
                .wait(held, lifecycle: interval),
                .append(
                    stream: "p",
                    events: [],
                    expecting: 2,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(fired: [window], renewed: [held]))]
                ),
            ]
        )
        #expect(durable.timers.map(\.kind) == [.window])
        _ = update(&durable, .recorded(upTo: 3, at: .seconds(111)))
        #expect(durable.timers.map(\.due) == [.seconds(121)])
        // The next interval's end, with nothing held: the key is free again.
        #expect(
            update(&durable, .timerDue(held)) == [
                .append(
                    stream: "p",
                    events: [],
                    expecting: 3,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(fired: [held]))]
                )
            ]
        )
        _ = update(&durable, .recorded(upTo: 4))
        #expect(durable.timers.isEmpty)
        #expect(durable.isQuiet)
        // A repeat of a wait already over changes nothing.
        #expect(update(&durable, .timerDue(held)).isEmpty)
    }

    /// An interval that ends while the event of the effect held for it is still on its way to the
    /// store: the effect starts once, when its event is recorded (never before, and not twice), and the
    /// record after it says the interval fired and the held effect opened the next.
    @Test func anIntervalEndingBeforeTheHeldEffectsEventIsRecordedStartsItOnceWhenItIs() {
        var durable = running()
        _ = update(&durable, .event(.ping("a"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .seconds(100)))
        _ = update(&durable, .event(.ping("b"), ticket: nil))
        let window = TimerName(version: 1, index: 0)
        let held = TimerName(version: 2, index: 0)
        #expect(update(&durable, .timerDue(window)).isEmpty)
        #expect(
            update(&durable, .recorded(upTo: 2, at: .seconds(104))) == [
                .effect(
                    .notify("b"),
                    key: IdempotencyKey(stream: "p", version: 2, index: 0),
                    lifecycle: .concurrent("notify")
                ),
                .wait(held, lifecycle: interval),
                .append(
                    stream: "p",
                    events: [],
                    expecting: 2,
                    snapshot: nil,
                    notes: [0: EventNote(timers: TimerNote(fired: [window], renewed: [held]))]
                ),
            ]
        )
        #expect(durable.timers.map(\.due) == [nil])
        #expect(update(&durable, .recorded(upTo: 3, at: .seconds(105))).isEmpty)
        #expect(durable.timers.map(\.due) == [.seconds(115)])
        #expect(durable.timers.map(\.kind) == [.window])
    }

    /// A throttled effect that `resume` asks for restarts work under way: it starts at once under its
    /// key, not throttled again (by the durable loop or by the engine), even within a recovered interval.
    @Test func aThrottledEffectResumedStartsAtOnce() throws {
        let program = DurableProgram(
            initial: [String](),
            update: Pings.update,
            resume: { log in log.isEmpty ? [] : [.notify("again")] }
        )
        .keepingTimers()
        let update = program.durableUpdate(snapshotEvery: nil)
        var durable = PingState(stream: "p", initial: [])
        let window = RecordedTimer(
            version: 1,
            index: 0,
            payload: try Pings.payload(.notify("a")),
            delay: .seconds(10),
            due: .seconds(110),
            kind: .window
        )
        #expect(
            update(&durable, .recovered(["a"], version: 2, snapshot: 0, timers: [window], now: .seconds(104))) == [
                .wait(window.name, lifecycle: .delayed(by: .seconds(6))),
                .effect(
                    .notify("again"),
                    key: IdempotencyKey(stream: "p", version: 2, index: 0, resumed: true),
                    lifecycle: .concurrent("notify")
                ),
            ]
        )
    }

    /// `latest: false`: an effect asked for within the interval is dropped, and nothing is recorded of it.
    @Test func anEffectWithinTheIntervalOfADroppingThrottleIsDropped() {
        var durable = running()
        _ = update(&durable, .event(.pingOnce("a"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .zero))
        #expect(
            update(&durable, .event(.pingOnce("b"), ticket: nil))
                == [.append(stream: "p", events: [.pingOnce("b")], expecting: 1, snapshot: nil)]
        )
        #expect(update(&durable, .recorded(upTo: 2, at: .zero)).isEmpty)
        #expect(durable.droppedEffects == 1)
        #expect(durable.timers.map(\.name) == [TimerName(version: 1, index: 0)])
    }

    /// A `cancel` of the key ends the effect held, recorded with the cancel; the interval goes on.
    @Test func aCancelEndsTheHeldEffectNotTheInterval() {
        var durable = running()
        _ = update(&durable, .event(.ping("a"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 1, at: .zero))
        _ = update(&durable, .event(.ping("b"), ticket: nil))
        _ = update(&durable, .recorded(upTo: 2, at: .zero))
        let effects = update(&durable, .event(.quiet, ticket: nil))
        guard case .append(_, _, _, _, let notes, _, _, _)? = effects.first else {
            Issue.record("no append: \(effects)")
            return
        }
        #expect(notes[0]?.timers.ended == [TimerName(version: 2, index: 0)])
        #expect(durable.timers.map(\.kind) == [.window])
        _ = update(&durable, .recorded(upTo: 3, at: .zero))
        // The interval ends with nothing held.
        let ended = update(&durable, .timerDue(TimerName(version: 1, index: 0)))
        #expect(!ended.contains { if case .effect = $0 { true } else { false } })
    }

    /// A recovered interval waits what is left of it, and the effect held for it waits for it; a held
    /// effect whose interval was not recorded starts at once.
    @Test func aRecoveredIntervalWaitsWhatIsLeftAndItsHeldEffectWaitsForIt() throws {
        var durable = PingState(stream: "p", initial: [])
        let window = RecordedTimer(
            version: 1,
            index: 0,
            payload: try Pings.payload(.notify("a")),
            delay: .seconds(10),
            due: .seconds(110),
            kind: .window
        )
        let held = RecordedTimer(
            version: 2,
            index: 0,
            payload: try Pings.payload(.notify("b")),
            delay: .seconds(10),
            due: .seconds(112),
            kind: .held
        )
        #expect(
            update(&durable, .recovered([], version: 2, snapshot: 0, timers: [window, held], now: .seconds(104)))
                == [.wait(window.name, lifecycle: .delayed(by: .seconds(6)))]
        )
        var alone = PingState(stream: "p", initial: [])
        #expect(
            update(&alone, .recovered([], version: 2, snapshot: 0, timers: [held], now: .seconds(104)))
                == [.wait(held.name, lifecycle: .delayed(by: .zero))]
        )
        let effects = update(&alone, .timerDue(held.name))
        #expect(
            effects.first
                == .effect(
                    .notify("b"),
                    key: IdempotencyKey(stream: "p", version: 2, index: 0),
                    lifecycle: .concurrent("notify")
                )
        )
        #expect(alone.timers.map(\.kind) == [.window])
    }

    /// A record with throttle timers reads back as written, in a layout older versions refuse; one with
    /// delays only keeps the layout it always had. A snapshot's timers keep their kinds.
    @Test func recordsAndSnapshotsKeepTheKindsOfTimers() throws {
        let note = EventNote(
            timers: TimerNote(
                started: [try started(.notify("a"), .held)],
                ended: [TimerName(version: 1, index: 2)],
                fired: [TimerName(version: 3, index: 0)],
                renewed: [TimerName(version: 2, index: 0)],
                recordedAt: .seconds(7)
            )
        )
        let stored = RecordEnvelope.event([1, 2, 3], note: note)
        #expect(stored[3] == RecordEnvelope.notedThrottled)
        let read = try RecordEnvelope.event(stored)
        #expect(read.event == [1, 2, 3])
        #expect(read.note == note)
        let bare = RecordEnvelope.event(nil, note: note)
        #expect(bare[3] == RecordEnvelope.bareThrottled)
        #expect(try RecordEnvelope.event(bare).note == note)
        let plain = EventNote(timers: TimerNote(fired: [TimerName(version: 3, index: 0)], recordedAt: .zero))
        #expect(RecordEnvelope.event([1], note: plain)[3] == RecordEnvelope.noted)

        let timers = [
            RecordedTimer(version: 1, index: 0, payload: [9], delay: .seconds(10), due: .seconds(110), kind: .window),
            RecordedTimer(version: 2, index: 1, payload: [8], delay: .seconds(10), due: nil, kind: .held),
            RecordedTimer(version: 3, index: 0, payload: [7], delay: .seconds(5), due: .seconds(4)),
        ]
        let snapshot = try RecordEnvelope.snapshot(
            RecordEnvelope.snapshot([42], keys: nil, timers: timers),
            capacity: 10
        )
        #expect(snapshot.state == [42])
        #expect(snapshot.timers == timers)
        // A timer of a kind this version does not know is refused, not misread.
        var unknown = RecordEnvelope.event(
            nil,
            note: EventNote(timers: TimerNote(started: [try started(.notify("a"), .held)]))
        )
        let kindAt = unknown.count - 1 - (try Pings.payload(.notify("a"))).count - 1 - 3
        #expect(unknown[kindAt] == TimerKind.held.rawValue)
        unknown[kindAt] = 7
        #expect(throws: CodecError.self) { try RecordEnvelope.event(unknown) }
    }

    /// Replaying records: a renewal turns the held effect into its key's interval, due from the
    /// record's time; a fired interval is gone.
    typealias Replay = DurableStorage<[String], Pings.Event, Pings.Effect>

    @Test func replayTurnsARenewedEffectIntoTheInterval() {
        var timers: [TimerName: RecordedTimer] = [:]
        let window = TimerNote.Started(index: 0, delay: .seconds(10), payload: .success([1]), kind: .window)
        let held = TimerNote.Started(index: 0, delay: .seconds(10), payload: .success([2]), kind: .held)
        Replay.apply(TimerNote(started: [window], recordedAt: .seconds(100)), at: 1, in: &timers)
        Replay.apply(TimerNote(started: [held], recordedAt: .seconds(101)), at: 2, in: &timers)
        let renewed = TimerName(version: 2, index: 0)
        Replay.apply(
            TimerNote(fired: [TimerName(version: 1, index: 0)], renewed: [renewed], recordedAt: .seconds(111)),
            at: 3,
            in: &timers
        )
        #expect(Array(timers.keys) == [renewed])
        #expect(timers[renewed]?.kind == .window)
        #expect(timers[renewed]?.due == .seconds(121))
    }
}

@Suite struct DurableThrottleLoopTests {
    func loop(
        _ store: any EventStore,
        _ clock: ManualClock,
        _ pings: Pings.Router,
        snapshotEvery: UInt64? = nil
    ) -> DurableLoop<[String], Pings.Event, Pings.Effect> {
        DurableLoop(
            stream: "p",
            program: Pings.program,
            effects: pings.router,
            store: store,
            snapshotEvery: snapshotEvery,
            clock: clock
        )
    }

    func running(
        _ loop: DurableLoop<[String], Pings.Event, Pings.Effect>,
        _ body: () async throws -> Void
    ) async throws {
        try await runDurably(loop, body)
    }

    /// An effect held for an interval outlives a restart: the next run starts it when the interval
    /// ends (not before), once; a later run does not start it again.
    @Test func aHeldEffectOutlivesARestartAndStartsOnceWhenTheIntervalEnds() async throws {
        let (store, clock, pings) = (InMemoryEventStore(), ManualClock(), Pings.Router())
        let first = loop(store, clock, pings)
        try await running(first) {
            _ = try await first.sendDurably(.ping("a"))
            await eventually("a to be recorded") { first.state == ["a"] && first.underlying.state.isQuiet }
            _ = try await first.sendDurably(.ping("b"))
            clock.advance(by: .seconds(4))
        }
        #expect(pings.started.withLock { $0 } == ["a"])
        let second = loop(store, clock, pings)
        try await running(second) {
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(5))
            // Recovered: a's interval waits, b waits for it; nothing started.
            _ = try await second.durableState()
            #expect(second.underlying.state.timers.map(\.kind) == [.window, .held])
            #expect(pings.started.withLock { $0 } == ["a"])
            clock.advance(by: .seconds(1))
            await eventually("b to be recorded") { second.state == ["a", "b"] && second.underlying.state.isQuiet }
        }
        let third = loop(store, clock, pings)
        try await running(third) {
            _ = try await third.durableState()
            // b's interval is still under way: it is kept, and starts nothing when it ends.
            #expect(third.underlying.state.timers.map(\.kind) == [.window])
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(10))
            await eventually("the interval to end") {
                third.underlying.state.timers.isEmpty && third.underlying.state.isQuiet
            }
        }
        #expect(pings.started.withLock { $0 } == ["a", "b"])
    }

    /// A restart within an interval does not let a second effect start early: one asked for after the
    /// restart waits for the end of the interval the first run opened.
    @Test func aRestartWithinTheIntervalDoesNotLetASecondEffectStartEarly() async throws {
        let (store, clock, pings) = (InMemoryEventStore(), ManualClock(), Pings.Router())
        let first = loop(store, clock, pings)
        try await running(first) {
            _ = try await first.sendDurably(.ping("a"))
            await eventually("a to be recorded") { first.state == ["a"] && first.underlying.state.isQuiet }
        }
        clock.advance(by: .seconds(3))
        let second = loop(store, clock, pings)
        try await running(second) {
            await clock.sleepers(atLeast: 1)
            _ = try await second.sendDurably(.ping("c"))
            _ = try await second.sendDurably(.pingOnce("x"))
            // x's key has no interval under way: it starts at once; c waits.
            await eventually("x to be recorded") { second.state == ["a", "x"] && second.underlying.state.isQuiet }
            #expect(pings.started.withLock { $0 } == ["a", "x"])
            clock.advance(by: .seconds(7))
            await eventually("c to be recorded") { second.state == ["a", "x", "c"] }
        }
        #expect(pings.started.withLock { $0 } == ["a", "x", "c"])
    }

    /// An interval due while no loop ran: the effect held for it starts as soon as the next run has
    /// recovered, once, from a snapshot that carries both.
    @Test func aHeldEffectDueDuringAnOutageStartsAtOnceFromASnapshot() async throws {
        let (store, clock, pings) = (InMemoryEventStore(), ManualClock(), Pings.Router())
        let first = loop(store, clock, pings, snapshotEvery: 1)
        try await running(first) {
            _ = try await first.sendDurably(.ping("a"))
            await eventually("a to be recorded") { first.state == ["a"] && first.underlying.state.isQuiet }
            _ = try await first.sendDurably(.ping("b"))
            // Snapshots wait for an idle thread, and a newer one replaces one still waiting: wait for
            // the one at b's version (3: a, a notified, b), which carries a's interval and b held.
            // (A look a millisecond, as `eventually` does, so a slow run is not starved by this one.)
            let limit = ContinuousClock.now + .seconds(300)
            while try await store.latestSnapshot(of: "p")?.version != 3 {
                try #require(ContinuousClock.now < limit, "the snapshot at b's version was never saved")
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        clock.advance(by: .seconds(3_600))
        let second = loop(store, clock, pings)
        try await running(second) {
            await eventually("b to be recorded") { second.state == ["a", "b"] && second.underlying.state.isQuiet }
        }
        #expect(pings.started.withLock { $0 } == ["a", "b"])
    }
}
