import EffectHandlers
import LoopCore
import LoopTesting
import Testing

@testable import LoopPersistence

/// An account that charges a fee per deposit: revision 1 charges 1, revision 2 charges 2.
enum Fees {
    enum Event: Codable, Hashable, Sendable {
        case deposit(Int)
    }

    struct State: Codable, Equatable, Sendable {
        var balance = 0
        var fees = 0
    }

    static func charging(_ fee: Int) -> Update<State, Event, Never> {
        Update { state, event in
            switch event {
            case .deposit(let amount):
                state.balance += amount - fee
                state.fees += fee
                return []
            }
        }
    }

    static let first = DurableProgram(initial: State(), update: charging(1))
    static let second = DurableProgram(initial: State(), update: charging(2), revision: 2)

    /// Runs `program` on `stream` of `store` (its snapshots in `states`' form), deposits each of
    /// `deposits` durably, and stops; returns the durable state before the stop.
    static func run(
        _ program: DurableProgram<State, Event, Never>,
        on store: any EventStore,
        stream: String = "account",
        states: any EventCodec<State> = BinaryCodec<State>(),
        snapshotEvery: UInt64? = nil,
        depositing deposits: [Int] = []
    ) async throws -> State {
        let loop = DurableLoop(
            stream: stream,
            program: program,
            effects: EffectRouter<Never, Event>(),
            store: store,
            events: BinaryCodec<Event>(),
            states: states,
            snapshotEvery: snapshotEvery
        )
        let running = Task { try await loop.run() }
        for amount in deposits { _ = try await loop.sendDurably(.deposit(amount)) }
        let state: State
        do {
            state = try await loop.durableState()
        } catch {
            loop.stop()
            // The run's own error says why: a recovery that failed is `storeFailed` there, whether the
            // read came before the failure or was refused after it.
            _ = try await running.value
            throw error
        }
        loop.stop()
        _ = try await running.value
        return state
    }
}

/// A new release of a durable program never re-decides what an earlier one recorded.
@Suite struct ProgramRevisionTests {
    @Test func aNewRevisionRecoversWhatTheEarlierOneAcknowledgedAndDecidesTheRestItsWay() async throws {
        let store = InMemoryEventStore()
        let acknowledged = try await Fees.run(Fees.first, on: store, depositing: [10, 10, 10])
        #expect(acknowledged == Fees.State(balance: 27, fees: 3))

        let second = Fees.second.replaying(revision: 1, with: Fees.charging(1))
        // Recovered through revision 1's update, not re-decided with a fee of 2.
        #expect(try await Fees.run(second, on: store) == acknowledged)
        // New deposits pay the new fee, and the records say which revision decided them.
        let after = try await Fees.run(second, on: store, depositing: [10])
        #expect(after == Fees.State(balance: 35, fees: 5))
        #expect(try await Fees.run(second, on: store) == after)
        let notes = try await store.read("account", after: 0, limit: 10).map {
            try RecordEnvelope.event($0.payload).note?.revision
        }
        #expect(notes == [nil, nil, nil, 2])

        // A third release replays both earlier ones.
        let third = DurableProgram(initial: Fees.State(), update: Fees.charging(3), revision: 3)
            .replaying(revision: 1, with: Fees.charging(1))
            .replaying(revision: 2, with: Fees.charging(2))
        #expect(try await Fees.run(third, on: store, depositing: [10]) == Fees.State(balance: 42, fees: 8))
    }

    @Test func aRevisionThatDoesNotReplayTheRecordedOneFailsToRecoverAndChangesNothing() async throws {
        let store = InMemoryEventStore()
        let acknowledged = try await Fees.run(Fees.first, on: store, depositing: [10, 10])
        do {
            _ = try await Fees.run(Fees.second, on: store, depositing: [])
            Issue.record("revision 2 recovered events only revision 1 can decide")
        } catch DurableLoopError.storeFailed(let failure) {
            #expect(failure.kind == .unknownRevision(1, version: 1, running: 2))
            #expect(failure.stream == "account")
            #expect(failure.description.contains("replaying(revision: 1, with:)"))
        }
        #expect(try await store.version(of: "account") == 2)
        // The release that wrote it still reads it.
        #expect(try await Fees.run(Fees.first, on: store) == acknowledged)
    }

    @Test func aSnapshotOfTheEarlierRevisionNeedsNoneOfItsUpdate() async throws {
        let store = InMemoryEventStore()
        let acknowledged = try await Fees.run(Fees.first, on: store, snapshotEvery: 2, depositing: [10, 10])
        #expect(try await store.latestSnapshot(of: "account")?.version == 2)
        // Nothing past the snapshot was decided by revision 1: revision 2 starts from it.
        #expect(try await Fees.run(Fees.second, on: store) == acknowledged)
        // Revision 2's snapshot says so, and the events after it are its own.
        _ = try await Fees.run(Fees.second, on: store, snapshotEvery: 2, depositing: [10, 10])
        let snapshot = try #require(try await store.latestSnapshot(of: "account"))
        let stored = try RecordEnvelope.snapshot(snapshot.payload, capacity: 1)
        #expect(snapshot.version == 4 && stored.revision == 2)
        let third = DurableProgram(initial: Fees.State(), update: Fees.charging(3), revision: 3)
            .replaying(revision: 2, with: Fees.charging(2))
        #expect(try await Fees.run(third, on: store, depositing: [10]) == Fees.State(balance: 41, fees: 9))
    }

    @Test func theOfflineReplayUsesTheRecordedRevisionsToo() async throws {
        let store = InMemoryEventStore()
        _ = try await Fees.run(Fees.first, on: store, depositing: [10])
        let second = Fees.second.replaying(revision: 1, with: Fees.charging(1))
        _ = try await Fees.run(second, on: store, depositing: [10])
        let replayed = try await StoreReplay.run(store: store, stream: "account", program: second)
        #expect(replayed.state == Fees.State(balance: 17, fees: 3))
        await #expect(throws: StoreReplay.Failure.self) {
            try await StoreReplay.run(store: store, stream: "account", program: Fees.second)
        }
    }

    @Test func theOfflineReplayNamesTheFirstRecordANewRevisionCannotReplay() async throws {
        let store = InMemoryEventStore()
        _ = try await Fees.run(Fees.first, on: store, depositing: [10, 10])
        _ = try await StoreReplay.run(store: store, stream: "account", program: Fees.first)
        let failure = await #expect(throws: StoreReplay.Failure.self) {
            try await StoreReplay.run(store: store, stream: "account", program: Fees.second)
        }
        #expect(
            failure?.description.hasPrefix("stream 'account': the event at version 1 was decided by revision 1") == true
        )
    }

    @Test func anUpdateChangedWithoutANewRevisionIsCaughtAtTheSnapshotWithItsDifferences() async throws {
        let store = InMemoryEventStore()
        _ = try await Fees.run(Fees.first, on: store, snapshotEvery: 2, depositing: [10, 10])
        // Revision 1 still, but a fee of 2: it would re-decide both deposits.
        let edited = DurableProgram(initial: Fees.State(), update: Fees.charging(2))
        let failure = await #expect(throws: StoreReplay.Failure.self) {
            try await StoreReplay.run(store: store, stream: "account", program: edited)
        }
        #expect(
            failure?.description
                == "stream 'account': the snapshot at version 2 differs from the events before it"
                + "\n  balance: 18 → 16\n  fees: 2 → 4"
        )
    }

    @Test func theCheckBeforeADeployGoesOverEveryStreamAndReportsEachThatDoesNotReplay() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await Fees.run(Fees.first, on: store, stream: "old", depositing: [10])
        _ = try await Fees.run(Fees.second, on: store, stream: "new", depositing: [10, 10])
        let streams = try store.streamNames()
        #expect(streams == ["new", "old"])
        let codecs = (BinaryCodec<Fees.Event>(), BinaryCodec<Fees.State>())
        // Revision 2 alone cannot replay the old stream; kept, revision 1's update can.
        let alone = await StoreReplay.verify(
            store: store,
            streams: streams,
            program: Fees.second,
            events: codecs.0,
            states: codecs.1
        )
        #expect(alone.streams == 2 && alone.records == 2)
        #expect(
            alone.failures.map(\.description) == [
                DurableFailure(.unknownRevision(1, version: 1, running: 2), stream: "old").description
            ]
        )
        let keeping = await StoreReplay.verify(
            store: store,
            streams: streams,
            program: Fees.second.replaying(revision: 1, with: Fees.charging(1)),
            events: codecs.0,
            states: codecs.1
        )
        #expect(keeping == StoreReplay.Verification(streams: 2, records: 3, failures: []))
        // Revision 1 cannot replay what revision 2 wrote (a rollback).
        let back = await StoreReplay.verify(
            store: store,
            streams: streams,
            program: Fees.first,
            events: codecs.0,
            states: codecs.1
        )
        #expect(back.failures.count == 1 && back.failures[0].description.hasPrefix("stream 'new'"))
        await store.close()
        #expect(throws: EventStoreError.self) { try store.streamNames() }
    }

    @Test func aRevisionIsWrittenInItsOwnLayoutsAndReadBack() throws {
        // Revision 1 (and a note without a revision) keeps the layouts older releases read.
        #expect(RecordEnvelope.event([7], note: nil) == [7])
        #expect(RecordEnvelope.snapshot([7], keys: nil, timers: [], revision: 1) == [7])
        for event: [UInt8]? in [[7, 8], nil] {
            let note = EventNote(revision: 4)
            let bytes = RecordEnvelope.event(event, note: note)
            // A layout older releases refuse rather than misread.
            #expect(bytes.starts(with: RecordEnvelope.marker + [event == nil ? 8 : 7]))
            let read = try RecordEnvelope.event(bytes)
            #expect(read.event == event && read.note == note)
        }
        let snapshot = RecordEnvelope.snapshot([7], keys: nil, timers: [], revision: 300)
        #expect(snapshot.starts(with: RecordEnvelope.marker + [9]))
        let read = try RecordEnvelope.snapshot(snapshot, capacity: 1)
        #expect(read.state == [7] && read.revision == 300 && read.keys == nil && read.timers.isEmpty)
        // A revision past what a record may hold is an error, not a trap.
        var damaged = RecordEnvelope.marker + [7, 16]
        BinaryTag.putVarint(UInt64(UInt32.max) + 1, &damaged)
        #expect(throws: CodecError.self) { try RecordEnvelope.event(damaged) }
    }
}
