import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopSupport
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The first example of Docs/Persistence.md, as it is there, so the guide stays true.
enum Guide {
    enum Account {
        enum Outcome: Codable, Hashable, Sendable {
            case done(balance: Int)
            case insufficient(balance: Int)
        }
        enum Event: Codable, Hashable, Sendable {
            case deposit(Int, replyTo: ReplyTo<Outcome>)
            case withdraw(Int, replyTo: ReplyTo<Outcome>)
        }
        struct State: Codable, Equatable, Sendable { var balance = 0 }
        enum Effect: Equatable, Sendable { case answer(Reply<Outcome>) }

        static func update(_ state: inout State, _ event: Event) -> [Effect] {
            switch event {
            case .deposit(let amount, let replyTo):
                state.balance += amount
                return [.answer(replyTo.reply(.done(balance: state.balance)))]
            case .withdraw(let amount, let replyTo):
                guard amount <= state.balance else {
                    return [.answer(replyTo.reply(.insufficient(balance: state.balance)))]
                }
                state.balance -= amount
                return [.answer(replyTo.reply(.done(balance: state.balance)))]
            }
        }

        // Which effects are replies: the group delivers those itself, after their event is recorded.
        static let program = DurableProgram(initial: State(), update: Update(update))
            .replying { if case .answer(let reply) = $0 { reply } else { nil } }
    }
}

@Suite struct PersistenceGuideTests {
    /// The guide gives its requests 2 s; here they get 10 minutes (the test's own limit ends it sooner):
    /// on a disk, a file store's `fdatasync` waits for everything the suites running in parallel wrote,
    /// and under the thread sanitizer one reply took more than 30 s.
    @Test(.timeLimit(.minutes(10)))
    func theFirstExampleRunsAsWritten() async throws {
        // On a memory file system where there is one: the guide's code is under test here, not the disk.
        let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        let directory = "\(base)/effectloop-guide-\(getpid())"
        removeTree(directory)
        defer { removeTree(directory) }
        let requestID = "req-1"
        let patience = Duration.seconds(600)
        let accounts = DurableLoopGroup<String, Guide.Account.State, Guide.Account.Event, Guide.Account.Effect>(
            program: Guide.Account.program,
            effects: EffectRouter(),
            store: try FileEventStore(directory: directory),
            passivation: .init(idleAfter: .seconds(300), maximumLive: 10_000)
        )
        let running = Task { try await accounts.run() }
        _ = try await accounts.request(to: "alice", timeout: patience) { .deposit(60, replyTo: $0) }
        let outcome = try await accounts.request(to: "alice", key: requestID, timeout: patience) {
            .withdraw(50, replyTo: $0)
        }
        #expect(outcome == .done(balance: 10))
        let retry = try await accounts.request(to: "alice", key: requestID, timeout: patience) {
            .withdraw(50, replyTo: $0)
        }
        #expect(retry == .done(balance: 10))
        #expect(try await accounts.durableState(of: "alice") == Guide.Account.State(balance: 10))
        accounts.stop()
        _ = try await running.value
    }

    @Test func theHarnessExampleRunsAsWritten() async throws {
        let accounts = DurableHarness<String, Account.State, Account.Event, Account.Effect>(program: Account.program)
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        try await accounts.restart()
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await accounts.state(of: "a") == Account.State(balance: 5))
        try await accounts.finish()
    }
}

/// The retention example of Docs/Persistence.md ("Retention and compaction"), as it is there.
@Suite struct RetentionGuideTests {
    @Test func theRetentionExampleOpensAStoreKeepingWhatItSays() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(
            directory: directory.path,
            options: .init(retention: .afterSnapshots(2))
        )
        for version in 1...3 as ClosedRange<UInt64> {
            _ = try await store.append([[UInt8(version)]], to: "order-17", expecting: version - 1)
            try await store.save(Snapshot(stream: "order-17", version: version, payload: []))
        }
        #expect(try await store.read("order-17", after: 2, limit: 10).map(\.payload) == [[3]])
        await #expect(throws: EventStoreError.self) { try await store.read("order-17", after: 1, limit: 10) }
        await store.close()
    }
}
