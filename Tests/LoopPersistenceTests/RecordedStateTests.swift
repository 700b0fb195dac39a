import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import Testing

/// `DurableProgram.recordedState(of:in:)`: the state a stream's records make, read without running it.
@Suite struct RecordedStateTests {
    typealias Ledgers = DurableLoopGroup<String, Ledger.State, Ledger.Event, Ledger.Effect>

    static let router = EffectRouter<Ledger.Effect, Ledger.Event>()
        .route(
            { if case .charge(let amount) = $0 { amount } else { nil } },
            to: ClosureSyncEffectHandler { amount, send in send(.charged(amount)) }
        )

    @Test(.timeLimit(.minutes(10))) func theRecordedStateIsWhatTheLiveEntityRecorded() async throws {
        let store = InMemoryEventStore()
        // A snapshot every 3 events: the read starts from one and folds the events after it.
        let group = Ledgers(program: Ledger.program, effects: Self.router, store: store, snapshotEvery: 3)
        let running = Task { try await group.run() }
        for amount in 1...7 { _ = try await group.sendDurably(.add(amount), to: "a") }
        _ = try await group.sendDurably(.add(100), to: "b")
        let live = try await group.durableState(of: "a")
        // Snapshots are saved off the acknowledgement path (on the idle thread): wait for one (every third
        // event makes one), so the read starts from it and folds the events after it.
        while try await store.latestSnapshot(of: "a") == nil { try await Task.sleep(for: .milliseconds(1)) }
        #expect(try await Ledger.program.recordedState(of: "a", in: store) == live)
        #expect(live.total == 28)
        // The read ran nothing: the store holds what it held, and no effect was performed twice.
        let version = try await store.version(of: "a")
        #expect(try await Ledger.program.recordedState(of: "a", in: store) == live)
        #expect(try await store.version(of: "a") == version)
        group.stop()
        _ = try await running.value
        #expect(try await Ledger.program.recordedState(of: "b", in: store).total == 100)
    }

    @Test func aStreamWithNoRecordsHasTheInitialState() async throws {
        let state = try await Ledger.program.recordedState(of: "nobody", in: InMemoryEventStore())
        #expect(state == Ledger.State())
    }

    @Test func aRecordThatDoesNotDecodeIsAnErrorNamingItsVersion() async throws {
        let store = InMemoryEventStore()
        try await Ledger.recordUndecodable("ledger", in: store)
        do {
            let state = try await Ledger.program.recordedState(of: "ledger", in: store)
            Issue.record("a stream that does not decode was read: \(state)")
        } catch {
            guard case .storeFailed(let reason) = error, case .undecodable(.event, version: 2, _) = reason.kind else {
                Issue.record("not an undecodable event at version 2: \(error)")
                return
            }
            #expect(reason.stream == "ledger")
        }
    }

    @Test func aStoreThatFailsIsAnError() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([try BinaryCodec<Ledger.Event>().encode(.add(1))], to: "a", expecting: 0)
        await store.close()
        do {
            let state = try await Ledger.program.recordedState(of: "a", in: store)
            Issue.record("a closed store was read: \(state)")
        } catch {
            guard case .storeFailed(let reason) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(reason.stream == "a")
        }
    }
}
