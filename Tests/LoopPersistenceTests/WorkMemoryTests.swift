import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

/// Entities with work under way while their total is odd: `resume` restarts a chore for them.
enum Chores {
    enum Event: Codable, Hashable, Sendable { case add(Int) }
    enum Effect: Codable, Hashable, Sendable, ManagedEffect {
        case chore
        var lifecycle: EffectLifecycle { .concurrent() }
    }

    static let program = DurableProgram<Int, Event, Effect>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount): total += amount
            }
            return []
        },
        resume: { total in total % 2 == 1 ? [.chore] : [] }
    )

    /// Chores do nothing.
    static let router = EffectRouter<Effect, Event>().route({ $0 }, to: ClosureSyncEffectHandler { _, _ in })

    static func group(_ store: any EventStore) -> DurableLoopGroup<String, Int, Event, Effect> {
        DurableLoopGroup(
            stream: { "chores-\($0)" },
            program: program,
            effects: router,
            store: store,
            remembering: WorkMemory { stream in stream.hasPrefix("chores-") ? String(stream.dropFirst(7)) : nil }
        )
    }
}

typealias ChoresState = DurableState<Int, Chores.Event, Chores.Effect>

@Suite struct WorkMemoryValueTests {
    let update = Chores.program.durableUpdate(snapshotEvery: nil, remembering: true)

    /// The batch that gives the entity work marks it (before it is appended); the one that ends it
    /// clears the mark (after).
    @Test func theProgramsOwnTransitionsSetAndClearTheMark() {
        var durable = ChoresState(stream: "c", initial: 0)
        _ = update(&durable, .recovered(0, version: 0, snapshot: 0))
        #expect(durable.unfinished == false)
        #expect(
            update(&durable, .event(.add(1), ticket: nil))
                == [.append(stream: "c", events: [.add(1)], expecting: 0, snapshot: nil, marking: true)]
        )
        _ = update(&durable, .recorded(upTo: 1))
        // Still odd: no change, no mark.
        #expect(
            update(&durable, .event(.add(2), ticket: nil))
                == [.append(stream: "c", events: [.add(2)], expecting: 1, snapshot: nil)]
        )
        _ = update(&durable, .recorded(upTo: 2))
        #expect(
            update(&durable, .event(.add(1), ticket: nil))
                == [.append(stream: "c", events: [.add(1)], expecting: 2, snapshot: nil, marking: false)]
        )
        #expect(durable.unfinished == false)
    }

    /// A recovered entity whose mark is not what its state says has it set right.
    @Test func aRecoveredEntitySetsItsMarkRight() {
        var durable = ChoresState(stream: "c", initial: 0)
        let effects = update(&durable, .recovered(1, version: 1, snapshot: 0, marked: false))
        #expect(
            effects == [
                .effect(.chore, key: IdempotencyKey(stream: "c", version: 1, index: 0, resumed: true)),
                .remember(stream: "c", unfinished: true),
            ]
        )
        var settled = ChoresState(stream: "c", initial: 0)
        #expect(
            update(&settled, .recovered(2, version: 2, snapshot: 0, marked: true)) == [
                .remember(stream: "c", unfinished: false)
            ]
        )
        var right = ChoresState(stream: "c", initial: 0)
        #expect(update(&right, .recovered(2, version: 2, snapshot: 0, marked: false)).isEmpty)
    }

    /// A timer waiting is work under way: marked with the event that starts it, cleared with the record
    /// of its start.
    @Test func aWaitingTimerIsWorkUnderWay() {
        let update = Reminders.program.durableUpdate(snapshotEvery: nil, remembering: true)
        var durable = ReminderState(stream: "r", initial: [])
        _ = update(&durable, .recovered([], version: 0, snapshot: 0))
        guard
            case .append(_, _, _, _, _, _, _, let marking)? = update(
                &durable,
                .event(.schedule("tea", after: .seconds(1)), ticket: nil)
            ).first
        else {
            Issue.record("no append")
            return
        }
        #expect(marking == true)
        _ = update(&durable, .recorded(upTo: 1, at: .zero))
        guard
            case .append(_, _, _, _, _, _, _, let cleared)? = update(
                &durable,
                .timerDue(TimerName(version: 1, index: 0))
            ).last
        else {
            Issue.record("no append")
            return
        }
        #expect(cleared == false)
    }
}

@Suite struct WorkMemoryGroupTests {
    /// Runs `group` until `body` returns, then stops it gracefully.
    func running<State, Event, Effect>(
        _ group: DurableLoopGroup<String, State, Event, Effect>,
        _ body: () async throws -> Void
    ) async throws {
        let run = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        try await body()
        group.stop()
        _ = try await run.value
    }

    /// 100,000 finished entities and 10 with work under way in one store: a restarted group recovers the
    /// 10, and none of the finished ones (nor those whose work ended).
    @Test func aRestartedGroupWakesExactlyTheEntitiesWithWorkUnderWay() async throws {
        let store = InMemoryEventStore()
        let codec = BinaryCodec<Chores.Event>()
        // History: 100,000 entities, settled (an even total each), never marked.
        let settled = try codec.encode(.add(2))
        for index in 0..<100_000 {
            _ = try await store.append([settled], to: "chores-old-\(index)", expecting: 0)
            // The in-memory store never suspends: let the tests running beside this one have the threads.
            if index % 500 == 0 { await Task.yield() }
        }
        let first = Chores.group(store)
        try await running(first) {
            // 10 left with work under way, 5 whose work ended again.
            for index in 0..<10 { _ = try await first.sendDurably(.add(1), to: "busy-\(index)") }
            for index in 0..<5 {
                _ = try await first.sendDurably(.add(1), to: "done-\(index)")
                _ = try await first.sendDurably(.add(1), to: "done-\(index)")
            }
            #expect(first.recoveries == 15)
        }

        let second = Chores.group(store)
        try await running(second) {
            await eventually("the busy ones to be live") {
                (0..<10).allSatisfy { second.state(of: "busy-\($0)") == 1 } && second.recoveries >= 10
            }
            #expect(second.recoveries == 10)
            #expect(second.state(of: "done-0") == nil)
            #expect(second.state(of: "old-0") == nil)
        }
    }

    /// A group entity's timer fires after a restart without anyone sending the entity an event.
    @Test func aRestartedGroupWakesAnEntityWhoseTimerWaits() async throws {
        let (store, clock, reminders) = (InMemoryEventStore(), ManualClock(), Reminders.Router())
        func group() -> DurableLoopGroup<String, [String], Reminders.Event, Reminders.Effect> {
            DurableLoopGroup(
                program: Reminders.program,
                effects: reminders.router,
                store: store,
                remembering: .streams(),
                clock: clock
            )
        }
        let first = group()
        try await running(first) {
            _ = try await first.sendDurably(.schedule("tea", after: .seconds(10)), to: "kitchen")
        }
        clock.advance(by: .seconds(10))
        let second = group()
        try await running(second) {
            await eventually("the reminder to be recorded") {
                second.state(of: "kitchen") == ["tea"] && second.underlying.state(of: "kitchen")?.isQuiet == true
            }
        }
        #expect(reminders.started.withLock { $0 } == ["tea"])
        // Its work ended: the next run wakes nobody.
        let third = group()
        try await running(third) { _ = try await third.durableState(of: "other") }
        #expect(third.recoveries == 1)
    }

    /// A mark the store refuses fails the append that waits for it (the entity stops, nothing recorded);
    /// once the store is back, the entity's next work is marked, and a restart wakes it.
    @Test func aRefusedMarkFailsItsAppendAndTheNextWorkIsMarked() async throws {
        let store = CountingStore()
        let first = Chores.group(store)
        try await running(first) {
            store.failAppends.withLock { $0 = true }
            await #expect(throws: DurableLoopError.self) { try await first.sendDurably(.add(1), to: "x") }
            store.failAppends.withLock { $0 = false }
            #expect(first.forgetFailure(of: "x"))
            _ = try await first.sendDurably(.add(1), to: "x")
        }
        #expect(try await store.version(of: "chores-x") == 1)
        let second = Chores.group(store)
        try await running(second) {
            await eventually("x to be woken") { second.state(of: "x") == 1 }
            #expect(second.recoveries == 1)
        }
    }

    /// Marks that do not read back stop the group's run with the reason, before any entity starts.
    @Test func marksThatDoNotDecodeStopTheRun() async throws {
        let store = InMemoryEventStore()
        _ = try await store.append([[0x09, 0x01]], to: "effectloop.work", expecting: 0)
        let group = Chores.group(store)
        await #expect(throws: DurableLoopError.self) { try await group.run() }
        do {
            _ = try await Chores.group(store).run()
        } catch let DurableLoopError.storeFailed(failure) {
            #expect(failure.description.contains("effectloop.work"))
        }
    }
}
