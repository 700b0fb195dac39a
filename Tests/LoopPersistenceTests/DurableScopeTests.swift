import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

/// A caller's id, as a request handler would set it (a logger's metadata, a trace).
enum CallerID {
    @TaskLocal static var current: String?
}

/// A ledger that announces each entry once it is durable; an announcement reports back, and the event
/// it sends files the entry. Every handler records the caller id it sees, and the scope records each
/// event it is told of.
enum Filing {
    enum Event: Codable, Hashable, Sendable {
        case record(Int, replyTo: ReplyTo<Int>)
        case announced(Int)
    }

    struct State: Codable, Equatable, Sendable {
        var entries: [Int] = []
        var filed: [Int] = []
    }

    enum Effect: Equatable, Sendable {
        case answer(Reply<Int>)
        case announce(Int)
        case file(Int)
    }

    static let program = DurableProgram(
        initial: State(),
        update: Update<State, Event, Effect> { state, event in
            switch event {
            case .record(let n, let replyTo):
                state.entries.append(n)
                return [.announce(n), .answer(replyTo.reply(n))]
            case .announced(let n):
                state.filed.append(n)
                return [.file(n)]
            }
        }
    )
    .replying { if case .answer(let reply) = $0 { reply } else { nil } }

    /// `seen`: the caller id each handler saw, by effect ("announce 3"); `told`: each event the scope was
    /// told of, as its case name and caller id.
    static func router(
        seen: Locked<[String: String?]>,
        told: Locked<[(event: String, caller: String?)]>
    ) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .route(
                { if case .announce(let n) = $0 { n } else { nil } },
                to: ClosureEffectHandler { n, send in
                    seen.withLock { $0["announce \(n)"] = CallerID.current }
                    await Task.yield()
                    // From 100 on, an announcement fails, and the error mapping reports it instead.
                    if n >= 100 { throw Unannounced() }
                    send(.announced(n))
                }
            )
            .route(
                { if case .file(let n) = $0 { n } else { nil } },
                to: ClosureSyncEffectHandler { n, _ in seen.withLock { $0["file \(n)"] = CallerID.current } }
            )
            .mapErrors { effect, _ in if case .announce(let n) = effect { .announced(n) } else { nil } }
            .scoped(
                EffectScope<Effect>(
                    capture: { CallerID.current },
                    sync: { id, _, body in try CallerID.$current.withValue(id) { try body() } },
                    async: { id, _, body in try await CallerID.$current.withValue(id) { try await body() } },
                    event: { id, event, _ in
                        told.withLock { $0.append((MetricsObserver<Never, Never>.caseName(event), id)) }
                    }
                )
            )
    }
}

struct Unannounced: Error {}

extension Filing {
    /// A filing on a durable loop in memory, with what its handlers saw and what its scope was told.
    static func loop() -> (
        DurableLoop<State, Event, Effect>, seen: Locked<[String: String?]>,
        told: Locked<[(event: String, caller: String?)]>
    ) {
        let seen = Locked<[String: String?]>([:])
        let told = Locked<[(event: String, caller: String?)]>([])
        let loop = DurableLoop(
            stream: "filing",
            program: program,
            effects: router(seen: seen, told: told),
            store: InMemoryEventStore()
        )
        return (loop, seen, told)
    }
}

@Suite struct DurableScopeTests {
    @Test func eachDurableEffectRunsWithTheContextOfItsOwnEventThoughTheirBatchesAreShared() async throws {
        let seen = Locked<[String: String?]>([:])
        let told = Locked<[(event: String, caller: String?)]>([])
        let ledgers = DurableLoopGroup<String, Filing.State, Filing.Event, Filing.Effect>(
            program: Filing.program,
            effects: Filing.router(seen: seen, told: told),
            store: InMemoryEventStore()
        )
        let running = Task { try await ledgers.run() }
        // Concurrent callers, on two entities: their events are recorded in shared appends (the first
        // ones wait while their entity recovers), yet each effect runs with its own caller's id.
        try await withThrowingTaskGroup(of: Int.self) { callers in
            for n in 0..<20 {
                callers.addTask {
                    try await CallerID.$current.withValue("caller-\(n)") {
                        // A hang guard, not a timing: under the thread sanitizer every test of the
                        // process shares two cores, and one request once waited more than a minute.
                        try await ledgers.request(to: "filing-\(n % 2)", timeout: .seconds(600)) {
                            .record(n, replyTo: $0)
                        }
                    }
                }
            }
            for try await _ in callers {}
        }
        await eventually("every filing") { seen.withLock { $0.count } == 40 }
        ledgers.stop()
        _ = try await running.value
        for n in 0..<20 {
            #expect(seen.withLock { $0["announce \(n)"] } == .some("caller-\(n)"))
            // The event the announcement's handler sent carries what the scope's wrap set there.
            #expect(seen.withLock { $0["file \(n)"] } == .some("caller-\(n)"))
        }
        // The scope is told of the program's events only (none of the store's), each with its context.
        let events = told.withLock { $0 }
        #expect(events.count == 40)
        for n in 0..<20 {
            #expect(events.filter { $0.caller == "caller-\(n)" }.map(\.event).sorted() == ["announced", "record"])
        }
    }

    @Test func aPlainSendAndADurableSendCarryTheirContextsToo() async throws {
        let (ledger, seen, _) = Filing.loop()
        let running = Task { try await ledger.run() }
        CallerID.$current.withValue("plain") { _ = ledger.send(.announced(1)) }
        _ = try await CallerID.$current.withValue("durable") { try await ledger.sendDurably(.announced(2)) }
        CallerID.$current.withValue("keyed") { _ = ledger.send(.announced(3), key: "three") }
        await eventually("every filing") { seen.withLock { $0.count } == 3 }
        ledger.stop()
        _ = try await running.value
        #expect(seen.withLock { $0["file 1"] } == .some("plain"))
        #expect(seen.withLock { $0["file 2"] } == .some("durable"))
        #expect(seen.withLock { $0["file 3"] } == .some("keyed"))
    }

    @Test func theEventAnErrorMapsToKeepsTheContextOfTheEffectThatFailed() async throws {
        let (filing, seen, told) = Filing.loop()
        let running = Task { try await filing.run() }
        for n in 100..<110 {
            _ = try await CallerID.$current.withValue("caller-\(n)") {
                // A hang guard, as above.
                try await filing.request(timeout: .seconds(600)) { .record(n, replyTo: $0) }
            }
        }
        await eventually("every filing") { seen.withLock { $0.count } == 20 }
        filing.stop()
        _ = try await running.value
        for n in 100..<110 { #expect(seen.withLock { $0["file \(n)"] } == .some("caller-\(n)")) }
        #expect(
            told.withLock { $0 }.filter { $0.event == "announced" }.compactMap(\.caller).sorted()
                == (100..<110).map { "caller-\($0)" }
        )
    }
}
