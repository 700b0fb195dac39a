import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import Testing

/// A ledger: `add` charges a card (an effect); the card's answer, `charged`, is an event too.
enum Ledger {
    enum Event: Codable, Hashable, Sendable {
        case add(Int)
        case charged(Int)
    }

    struct State: Codable, Equatable, Sendable {
        var total = 0
        var charged: [Int] = []
        var uncharged: [Int] = []
    }

    enum Effect: Equatable, Sendable {
        case charge(Int)
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .add(let amount):
            state.total += amount
            state.uncharged.append(amount)
            return [.charge(amount)]
        case .charged(let amount):
            state.charged.append(amount)
            state.uncharged.removeAll { $0 == amount }
            return []
        }
    }

    /// Charges that were asked for but never answered are asked for again.
    static func resume(_ state: State) -> [Effect] {
        state.uncharged.map(Effect.charge)
    }

    static let program = DurableProgram(initial: State(), update: Update(update), resume: resume)

    /// Records a stream of two events in `store` whose second no longer decodes (the program's events
    /// changed since it was written).
    static func recordUndecodable(_ stream: String, in store: any EventStore) async throws {
        _ = try await store.append(
            [try BinaryCodec<Event>().encode(.add(1)), Array(#"{"refund":{"_0":3}}"#.utf8)],
            to: stream,
            expecting: 0
        )
    }
}

/// Charges cards, recording each call and what the store held when the call was made.
final class Card: Sendable {
    let calls = Locked<[(amount: Int, storedVersion: UInt64)]>([])
    let store: any EventStore
    let stream: String

    init(store: any EventStore, stream: String = "ledger") {
        self.store = store
        self.stream = stream
    }

    var amounts: [Int] { calls.withLock { $0.map(\.amount) } }

    var router: EffectRouter<Ledger.Effect, Ledger.Event> {
        EffectRouter<Ledger.Effect, Ledger.Event>()
            .route(
                { if case .charge(let amount) = $0 { amount } else { nil } },
                to: ClosureEffectHandler { amount, send in
                    let stored = try await self.store.version(of: self.stream)
                    self.calls.withLock { $0.append((amount, stored)) }
                    send(.charged(amount))
                }
            )
    }
}

/// Waits until `condition` holds, looking again after each yield and then each millisecond; fails the
/// test if it never does within five minutes (a net against a hang, not a timing).
func eventually(_ what: String, _ condition: () -> Bool) async {
    let limit = ContinuousClock.now + .seconds(300)
    var looks = 0
    while !condition() {
        guard ContinuousClock.now < limit else {
            Issue.record("never happened: \(what)")
            return
        }
        looks += 1
        // A few quick looks, then one a millisecond: a test spinning on one of the concurrency pool's
        // two threads slows every other test of the process (under TSAN, past their time limits).
        if looks < 64 { await Task.yield() } else { try? await Task.sleep(for: .milliseconds(1)) }
    }
}

@Suite struct DurableLoopTests {
    typealias Durable = DurableState<Ledger.State, Ledger.Event, Ledger.Effect>

    let update = Ledger.program.durableUpdate(snapshotEvery: 3)

    func running(_ state: Ledger.State = .init(), version: UInt64 = 0) -> Durable {
        var durable = Durable(stream: "ledger", initial: .init())
        _ = update(&durable, .recovered(state, version: version, snapshot: 0))
        return durable
    }

    // MARK: The durable update, as values

    @Test func eventsWaitWhileRecoveringAndResumeComesFirst() {
        var durable = Durable(stream: "ledger", initial: .init())
        #expect(update(&durable, .event(.add(5), ticket: 1)).isEmpty)
        #expect(durable.held.count == 1)
        let recovered = Ledger.State(total: 2, charged: [], uncharged: [2])
        let effects = update(&durable, .recovered(recovered, version: 7, snapshot: 7))
        #expect(
            effects == [
                // A resumed effect carries the recovered version, marked resumed.
                .effect(.charge(2), key: IdempotencyKey(stream: "ledger", version: 7, index: 0, resumed: true)),
                .append(stream: "ledger", events: [.add(5)], expecting: 7, snapshot: nil),
            ]
        )
        #expect(durable.state.total == 7 && durable.version == 8 && durable.recorded == 7)
    }

    @Test func effectsWaitUntilTheirEventIsRecorded() {
        var durable = running()
        #expect(
            update(&durable, .event(.add(1), ticket: nil))
                == [.append(stream: "ledger", events: [.add(1)], expecting: 0, snapshot: nil)]
        )
        // While that append is under way, later events are applied and wait for the next one.
        #expect(update(&durable, .event(.add(2), ticket: 9)).isEmpty)
        #expect(durable.state.total == 3)
        #expect(
            update(&durable, .recorded(upTo: 1))
                == [
                    .effect(.charge(1), key: IdempotencyKey(stream: "ledger", version: 1, index: 0)),
                    .append(stream: "ledger", events: [.add(2)], expecting: 1, snapshot: nil),
                ]
        )
        // The second batch brings the count since the last snapshot to 2; a third event would carry one.
        #expect(
            update(&durable, .recorded(upTo: 2)) == [
                .effect(.charge(2), key: IdempotencyKey(stream: "ledger", version: 2, index: 0)),
                .acknowledge([.init(ticket: 9, version: 2)]),
            ]
        )
        let third = update(&durable, .event(.add(3), ticket: nil))
        #expect(third == [.append(stream: "ledger", events: [.add(3)], expecting: 2, snapshot: durable.state)])
    }

    @Test func aStoreFailureRefusesWaitingSendersAndStops() {
        var durable = running()
        _ = update(&durable, .event(.add(1), ticket: 4))
        let full = DurableFailure(.storeError("disk full"), stream: "ledger")
        #expect(update(&durable, .failed(full)) == [.fail(stream: "ledger", tickets: [4], reason: full), .stop])
        #expect(durable.phase == .failed(full))
        // Nothing is applied any more; a waiting sender is told why.
        #expect(update(&durable, .event(.add(2), ticket: 5)) == [.fail(stream: "ledger", tickets: [5], reason: full)])
        #expect(durable.state.total == 1)
        #expect(update(&durable, .recorded(upTo: 1)).isEmpty)
    }

    // MARK: Running

    @Test func anEventIsDurableBeforeItsEffectStarts() async throws {
        let store = InMemoryEventStore()
        let card = Card(store: store)
        let loop = DurableLoop(stream: "ledger", program: Ledger.program, effects: card.router, store: store)
        let running = Task { try await loop.run() }
        #expect(try await loop.sendDurably(.add(5)) == 1)
        // The first charge's answer may be recorded before the second event or after it.
        let second = try await loop.sendDurably(.add(7))
        #expect(second == 2 || second == 3)
        await eventually("both charges answered") { loop.state.charged.count == 2 }
        // Each charge saw its event in the store; the answers are recorded too.
        #expect(card.calls.withLock { $0.allSatisfy { $0.storedVersion >= ($0.amount == 5 ? 1 : second) } })
        await eventually("the answers recorded") { loop.version == 4 }
        let stored = try await store.read("ledger", after: 0, limit: 10).map {
            try BinaryCodec<Ledger.Event>().decode($0.payload)
        }
        #expect(Set(stored) == [.add(5), .add(7), .charged(5), .charged(7)])
        loop.stop()
        _ = try await running.value
    }

    @Test func eachEffectRunsUnderTheKeyOfItsEventAndAResumedOneUnderTheRecoveredVersion() async throws {
        let store = InMemoryEventStore()
        _ = try await store.append(
            [Ledger.Event.add(5)].map { try BinaryCodec<Ledger.Event>().encode($0) },
            to: "ledger",
            expecting: 0
        )
        let keys = Locked<[String]>([])
        let router = EffectRouter<Ledger.Effect, Ledger.Event>()
            .route(
                { if case .charge(let amount) = $0 { amount } else { nil } },
                to: ClosureEffectHandler { amount, send in
                    keys.withLock { $0.append(IdempotencyKey.current?.description ?? "none") }
                    send(.charged(amount))
                }
            )
        let loop = DurableLoop(stream: "ledger", program: Ledger.program, effects: router, store: store)
        let running = Task { try await loop.run() }
        // The recovered charge of 5 resumes; the charge of 7 is event 2's first effect.
        #expect(try await loop.sendDurably(.add(7)) == 2)
        await eventually("both charges ran") { keys.withLock { $0.count } == 2 }
        #expect(Set(keys.withLock { $0 }) == ["ledger@1~resume#0", "ledger@2#0"])
        #expect(IdempotencyKey.current == nil)
        loop.stop()
        _ = try await running.value
    }

    @Test func aRestartRecoversTheStateAndResumesOnlyUnfinishedWork() async throws {
        let store = InMemoryEventStore()
        // The first run records two charges and their answers, and one charge whose answer never came.
        _ = try await store.append(
            [Ledger.Event.add(5), .charged(5), .add(7)].map { try BinaryCodec<Ledger.Event>().encode($0) },
            to: "ledger",
            expecting: 0
        )
        let card = Card(store: store)
        let loop = DurableLoop(stream: "ledger", program: Ledger.program, effects: card.router, store: store)
        let running = Task { try await loop.run() }
        #expect(try await loop.sendDurably(.add(1)) == 4)
        await eventually("resumed and new charges answered") { loop.state.uncharged.isEmpty }
        // 5 was charged before the restart and is not charged again; 7 is resumed; 1 is new.
        #expect(card.amounts.sorted() == [1, 7])
        #expect(loop.state.total == 13)
        #expect(loop.state.charged.sorted() == [1, 5, 7])
        loop.stop()
        _ = try await running.value
    }

    @Test func snapshotsBoundWhatRecoveryReads() async throws {
        let store = CountingStore()
        let card = Card(store: store)
        let first = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: card.router,
            store: store,
            snapshotEvery: 4
        )
        let running = Task { try await first.run() }
        for amount in 1...10 { _ = try await first.sendDurably(.add(amount)) }
        await eventually("every charge answered and recorded") {
            first.state.charged.count == 10 && first.version == 20
        }
        first.stop()
        _ = try await running.value
        let snapshot = try #require(try await store.latestSnapshot(of: "ledger"))
        #expect(snapshot.version >= 16)

        store.eventsRead.withLock { $0 = 0 }
        let second = DurableLoop(stream: "ledger", program: Ledger.program, effects: card.router, store: store)
        let again = Task { try await second.run() }
        #expect(try await second.sendDurably(.add(100)) == 21)
        #expect(second.state.total == 155)
        #expect(store.eventsRead.withLock { $0 } == Int(20 - snapshot.version))
        second.stop()
        _ = try await again.value
    }

    @Test func aFailingStoreStopsTheLoopAndNoEffectOfAnUnrecordedEventRuns() async throws {
        let store = CountingStore()
        store.failAppends.withLock { $0 = true }
        let card = Card(store: store)
        let loop = DurableLoop(stream: "ledger", program: Ledger.program, effects: card.router, store: store)
        let running = Task { try await loop.run() }
        let disk = EventStoreError(.io(code: 28, operation: "write to disk"), stream: "ledger")
        let full = DurableLoopError.storeFailed(DurableFailure(.store(disk), stream: "ledger"))
        // The store's own error, typed, and the same words as the store's.
        #expect(full.description == "the durable loop stopped: \(disk)")
        await #expect(throws: full) { try await loop.sendDurably(.add(5)) }
        await #expect(throws: full) { _ = try await running.value }
        #expect(card.amounts.isEmpty)
        #expect(loop.send(.add(1)) == .rejected(.failed))
        await #expect(throws: DurableLoopError.rejected(.failed)) { try await loop.sendDurably(.add(1)) }
    }

    /// Senders waiting on a loop stopped before it ran are told, never left waiting.
    @Test func stoppingBeforeRunningAnswersWaitingSenders() async throws {
        let store = InMemoryEventStore()
        let loop = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: Card(store: store).router,
            store: store
        )
        let waiter = Task { try await loop.sendDurably(.add(1)) }
        await eventually("the event queued") { loop.underlying.report.eventsSent >= 1 }
        loop.stop()
        await #expect(throws: DurableLoopError.ended) { try await waiter.value }
    }

    /// Events since the last snapshot count across restarts, so a loop that never lives for
    /// `snapshotEvery` events still gets snapshots.
    @Test func snapshotsCountEventsAcrossRestarts() async throws {
        let store = InMemoryEventStore()
        let quiet = EffectRouter<Ledger.Effect, Ledger.Event>()
            .route(
                { if case .charge(let amount) = $0 { amount } else { nil } },
                to: ClosureSyncEffectHandler { _, _ in }
            )
        for round in 0..<4 {
            let loop = DurableLoop(
                stream: "ledger",
                program: Ledger.program,
                effects: quiet,
                store: store,
                snapshotEvery: 4
            )
            let running = Task { try await loop.run() }
            for amount in 1...3 { _ = try await loop.sendDurably(.add(round * 10 + amount)) }
            loop.stop()
            _ = try await running.value
        }
        #expect(try await store.version(of: "ledger") == 12)
        let snapshot = try await store.latestSnapshot(of: "ledger")
        #expect((snapshot?.version ?? 0) >= 8)
    }

    /// A snapshot that cannot be saved does not stop the loop: its events are durable.
    @Test func aFailedSnapshotIsReportedAndTheLoopGoesOn() async throws {
        let store = CountingStore()
        store.failSaves.withLock { $0 = true }
        let loop = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: Card(store: store).router,
            store: store,
            snapshotEvery: 1
        )
        let running = Task { try await loop.run() }
        for amount in 1...3 { #expect(try await loop.sendDurably(.add(amount)) >= UInt64(amount)) }
        await eventually("a failed snapshot reported") { loop.underlying.state.lastSnapshotFailure != nil }
        #expect(loop.underlying.state.lastSnapshotFailure?.contains("cannot save the snapshot") == true)
        #expect(loop.underlying.state.phase == .running)
        loop.stop()
        _ = try await running.value
    }

    /// An event on disk that no longer decodes (the program's events changed) stops that loop with an
    /// error naming the stream and version.
    @Test func anEventThatNoLongerDecodesIsNamed() async throws {
        let store = InMemoryEventStore()
        try await Ledger.recordUndecodable("ledger", in: store)
        let loop = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: Card(store: store).router,
            store: store
        )
        do {
            try await loop.run()
            Issue.record("a stream that does not decode recovered")
        } catch let error as DurableLoopError {
            guard case .storeFailed(let reason) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(
                reason.description.hasPrefix(
                    "stream 'ledger': the event at version 2 does not decode: cannot decode Event"
                )
            )
            #expect(reason.isUndecodable && reason.whileRecovering && !reason.isFenced)
            guard case .undecodable(.event, version: 2, _) = reason.kind else {
                Issue.record("not an undecodable event: \(reason.kind)")
                return
            }
        }
    }

    @Test func aRestartOnTheFileStoreContinues() async throws {
        let directory = try TemporaryDirectory()
        do {
            let store = try FileEventStore(directory: directory.path)
            let loop = DurableLoop(
                stream: "ledger",
                program: Ledger.program,
                effects: Card(store: store).router,
                store: store
            )
            let running = Task { try await loop.run() }
            for amount in [3, 4] { _ = try await loop.sendDurably(.add(amount)) }
            await eventually("answers recorded") { loop.version == 4 }
            loop.stop()
            _ = try await running.value
            await store.close()
        }
        let store = try FileEventStore(directory: directory.path)
        let card = Card(store: store)
        let loop = DurableLoop(stream: "ledger", program: Ledger.program, effects: card.router, store: store)
        let running = Task { try await loop.run() }
        #expect(try await loop.sendDurably(.add(10)) == 5)
        #expect(loop.state.total == 17)
        await eventually("the new charge answered") { card.amounts == [10] }
        loop.stop()
        _ = try await running.value
        await store.close()
    }
}

/// An in-memory store that counts the events read, and fails appends when told to.
final class CountingStore: EventStore {
    let inner = InMemoryEventStore()
    let eventsRead = Locked(0)
    let failAppends = Locked(false)
    let failSaves = Locked(false)

    func append(_ payloads: [[UInt8]], to stream: String, expecting expectedVersion: UInt64) async throws -> UInt64 {
        if failAppends.withLock({ $0 }) {
            throw EventStoreError(.io(code: 28, operation: "write to disk"), stream: stream)
        }
        return try await inner.append(payloads, to: stream, expecting: expectedVersion)
    }

    func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
        let events = try await inner.read(stream, after: version, limit: limit)
        eventsRead.withLock { $0 += events.count }
        return events
    }

    func version(of stream: String) async throws -> UInt64 { try await inner.version(of: stream) }
    func save(_ snapshot: Snapshot) async throws {
        if failSaves.withLock({ $0 }) {
            throw EventStoreError(.io(code: 28, operation: "save"), stream: snapshot.stream)
        }
        try await inner.save(snapshot)
    }

    func latestSnapshot(of stream: String) async throws -> Snapshot? { try await inner.latestSnapshot(of: stream) }
}
