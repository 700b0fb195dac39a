// The code of Docs/Persistence.md. Each region between `// snippet` and `// end snippet` is one code
// block of the guide, in order, as the guide shows it (`make lint` compares them; `swift
// .ci/guide-check.swift --write` copies them into the guide); `// snippet imports A B` shows the block
// opening with `import A` and `import B`, which the file has at its top. What sits outside the regions
// is what a block needs around it to compile: the values a test uses, the parameters a fragment takes.

import EffectHandlers
import LoopCore
import LoopPersistence
import LoopSupport
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

// snippet imports EffectHandlers LoopCore LoopPersistence
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
// end snippet

/// The service's part of the first example: its group on a file store in `directory`, and a request under
/// `requestID`; then, past the guide's code, the same request again (a retry) and the state on disk.
func withdrawFromAlice(
    directory: String,
    requestID: String
) async throws -> (outcome: Account.Outcome, retry: Account.Outcome, recorded: Account.State) {
    // snippet
    let accounts = DurableLoopGroup<String, Account.State, Account.Event, Account.Effect>(
        program: Account.program,
        effects: EffectRouter(),  // the program's other effects, if it has any
        store: try FileEventStore(directory: directory),
        passivation: .init(idleAfter: .seconds(300), maximumLive: 10_000)
    )
    let running = Task { try await accounts.run() }

    // An HTTP handler: 200 once the withdrawal is on disk, 409 when refused, the same answer for a retry.
    let outcome = try await accounts.request(to: "alice", key: requestID, timeout: .seconds(30)) {
        .withdraw(50, replyTo: $0)
    }
    // end snippet
    let retry = try await accounts.request(to: "alice", key: requestID, timeout: .seconds(30)) {
        .withdraw(50, replyTo: $0)
    }
    let recorded = try await accounts.durableState(of: "alice")
    accounts.stop()
    _ = try await running.value
    return (outcome, retry, recorded)
}

/// A directory of its own for a test's file store, removed with the value: on a memory file system where
/// there is one (the guide's code is under test here, not the disk, whose `fdatasync` waits for everything
/// the tests running beside it wrote).
final class ScratchDirectory: Sendable {
    let path: String

    init() throws {
        let parent = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        var template = Array("\(parent)/effectloop-guide-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ $0.baseAddress.flatMap(mkdtemp) }) else {
            throw ScratchDirectoryError(parent: parent)
        }
        path = String(cString: made)
    }

    deinit { removeTree(path) }
}

struct ScratchDirectoryError: Error {
    var parent: String
}

@Test func aWithdrawalIsAnsweredOnceItIsOnDiskAndARetryIsNotAppliedAgain() async throws {
    let directory = try ScratchDirectory()
    // An earlier run of the service recorded Alice's deposit.
    let store = try FileEventStore(directory: directory.path)
    let earlier = DurableLoopGroup<String, Account.State, Account.Event, Account.Effect>(
        program: Account.program,
        effects: EffectRouter(),
        store: store
    )
    let running = Task { try await earlier.run() }
    #expect(try await earlier.request(to: "alice") { .deposit(80, replyTo: $0) } == .done(balance: 80))
    earlier.stop()
    _ = try await running.value
    await store.close()

    let (outcome, retry, recorded) = try await withdrawFromAlice(directory: directory.path, requestID: "req-1")
    #expect(outcome == .done(balance: 30))
    #expect(retry == .done(balance: 30))
    #expect(recorded == Account.State(balance: 30))
}

/// The demo's job runner, as much of it as `resume` needs.
enum JobRunner {
    struct Spec: Codable, Equatable, Sendable {
        var name: String
        var command: String
        var timeout: Duration?
    }
    enum Status: Codable, Equatable, Sendable {
        case queued
        case running(attempt: Int)
        case succeeded(attempts: Int)
    }
    struct Job: Codable, Equatable, Sendable {
        var spec: Spec
        var status: Status
    }
    struct State: Codable, Equatable, Sendable {
        /// The jobs in the order they were submitted.
        var ordered: [Job]
    }
    enum Effect: Equatable, Sendable {
        case run(name: String, attempt: Int, command: String, timeout: Duration?)
    }
}

extension JobRunner {
    // snippet
    static func resume(_ state: State) -> [Effect] {
        state.ordered.flatMap { job -> [Effect] in
            guard case .running(let attempt) = job.status else { return [] }
            return [.run(name: job.spec.name, attempt: attempt, command: job.spec.command, timeout: job.spec.timeout)]
        }
    }
    // end snippet
}

@Test func aRecoveredRunStartsAgainTheJobThatWasRunningOnly() {
    let recovered = JobRunner.State(ordered: [
        JobRunner.Job(spec: .init(name: "a", command: "make a", timeout: nil), status: .running(attempt: 1)),
        JobRunner.Job(spec: .init(name: "b", command: "make b", timeout: nil), status: .succeeded(attempts: 1)),
        JobRunner.Job(spec: .init(name: "c", command: "make c", timeout: nil), status: .queued),
    ])
    // snippet
    #expect(JobRunner.resume(recovered) == [.run(name: "a", attempt: 1, command: "make a", timeout: nil)])
    // end snippet
}

/// Reminders: `schedule` asks for a reminder after a delay (a timer), `cancel` cancels it, `debounce`
/// asks for a summary that a newer one replaces; a reminder, when due, sends `reminded` back.
enum Reminders {
    enum Event: Codable, Hashable, Sendable {
        case schedule(String, after: Duration)
        case debounce(String, quiet: Duration)
        case cancel
        case reminded(String)
    }

    // snippet
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
    static let program = DurableProgram(initial: [String](), update: update).keepingTimers()
    // end snippet

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

    /// Reminders and summaries come back as `reminded`, and each start is told to `started`.
    static func router(_ started: AsyncStream<String>.Continuation) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .route(
                { effect -> String? in
                    switch effect {
                    case .remind(let text, _), .summarize(let text, _): text
                    case .cancelReminders: nil
                    }
                },
                to: ClosureEffectHandler { text, send in
                    send(.reminded(text))
                    started.yield(text)
                }
            )
            .route({ if case .cancelReminders = $0 { () } else { nil } }, to: ClosureSyncEffectHandler { _, _ in })
    }
}

/// Runs `loop` until `body` returns, then stops it gracefully.
func running<State: Sendable, Event: Sendable, Effect: Sendable>(
    _ loop: DurableLoop<State, Event, Effect>,
    _ body: () async throws -> Void
) async throws {
    let run = Task { try await loop.run() }
    _ = await loop.waitUntilRunning()
    try await body()
    loop.stop()
    _ = try await run.value
}

/// A reminder due while no loop ran starts once the next loop recovers, and never again. The test waits
/// for the handler to say it started: a reminder lost would keep it waiting, until the time limit.
@Test(.timeLimit(.minutes(10))) func aReminderDueDuringAnOutageStartsOnceAfterIt() async throws {
    let (store, clock) = (InMemoryEventStore(), ManualClock())
    let (started, starts) = AsyncStream<String>.makeStream()
    func loop() -> DurableLoop<[String], Reminders.Event, Reminders.Effect> {
        DurableLoop(
            stream: "kitchen",
            program: Reminders.program,
            effects: Reminders.router(starts),
            store: store,
            clock: clock
        )
    }
    let first = loop()
    try await running(first) { _ = try await first.sendDurably(.schedule("tea", after: .seconds(10))) }
    // The process is down for an hour: the reminder falls due meanwhile.
    clock.advance(by: .seconds(3_600))
    let second = loop()
    try await running(second) {
        var iterator = started.makeAsyncIterator()
        #expect(await iterator.next() == "tea")
        let state = try await second.durableState()
        #expect(state == ["tea"])
    }
    let third = loop()
    try await running(third) {
        let state = try await third.durableState()
        #expect(state == ["tea"])
    }
    starts.finish()
    #expect(await started.reduce(into: []) { $0.append($1) } == [String]())
}

@Test func aHarnessGoesThroughRequestsARestartAndTheState() async throws {
    // snippet
    let accounts = DurableHarness<String, Account.State, Account.Event, Account.Effect>(program: Account.program)
    #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
    try await accounts.restart()  // stop; the next call recovers from what was recorded
    #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
    #expect(try await accounts.state(of: "a") == Account.State(balance: 5))
    try await accounts.finish()  // fails the test for effects never looked at
    // end snippet
}

/// Chores an entity is asked to do: each is work under way until its handler says it is done.
enum Chores {
    struct State: Codable, Equatable, Sendable { var pending: [String] = [] }
    enum Event: Codable, Hashable, Sendable {
        case asked(String)
        case done(String)
    }
    enum Effect: Codable, Hashable, Sendable { case doChore(String) }

    static let program = DurableProgram<State, Event, Effect>(
        initial: State(),
        update: Update { state, event in
            switch event {
            case .asked(let chore):
                state.pending.append(chore)
                return [.doChore(chore)]
            case .done(let chore):
                state.pending.removeAll { $0 == chore }
                return []
            }
        },
        resume: { state in state.pending.map(Effect.doChore) }
    )

    /// A router whose handler does each chore with `work`; it then reports the chore done if `finishes`.
    static func router(
        finishes: Bool,
        _ work: @escaping @Sendable (String) -> Void = { _ in }
    ) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .route(
                { if case .doChore(let chore) = $0 { chore } else { nil } },
                to: ClosureEffectHandler { chore, send in
                    if finishes { send(.done(chore)) }
                    work(chore)
                }
            )
    }
}

func choresGroup(
    program: DurableProgram<Chores.State, Chores.Event, Chores.Effect>,
    router: EffectRouter<Chores.Effect, Chores.Event>,
    store: any EventStore
) -> DurableLoopGroup<String, Chores.State, Chores.Event, Chores.Effect> {
    // snippet
    let group = DurableLoopGroup(
        stream: { "chores-\($0)" },
        program: program,
        effects: router,
        store: store,
        remembering: WorkMemory { stream in stream.hasPrefix("chores-") ? String(stream.dropFirst(7)) : nil }
    )
    // end snippet
    return group
}

/// The test waits for the handler to say it did the chore: an entity never woken would keep it waiting,
/// until the time limit.
@Test(.timeLimit(.minutes(10))) func aRestartedGroupWakesTheEntityWhoseChoreWasUnderWayAndNoOther() async throws {
    let store = InMemoryEventStore()
    // The first process stops with the dishes under way; the office's chore was done.
    let first = choresGroup(program: Chores.program, router: Chores.router(finishes: false), store: store)
    let run = Task { try await first.run() }
    _ = await first.waitUntilRunning()
    _ = try await first.sendDurably(.asked("dishes"), to: "home")
    _ = try await first.sendDurably(.asked("filing"), to: "office")
    _ = try await first.sendDurably(.done("filing"), to: "office")
    first.stop()
    _ = try await run.value

    let (done, finished) = AsyncStream<String>.makeStream()
    let second = choresGroup(
        program: Chores.program,
        router: Chores.router(finishes: true) { finished.yield($0) },
        store: store
    )
    let again = Task { try await second.run() }
    // Nobody sends the home an event: the group wakes it, and its program resumes the dishes.
    var iterator = done.makeAsyncIterator()
    #expect(await iterator.next() == "dishes")
    #expect(try await second.durableState(of: "home") == Chores.State())
    #expect(second.state(of: "office") == nil)
    #expect(second.recoveries == 1)
    second.stop()
    _ = try await again.value
    finished.finish()
}

func openRetaining(directory: String) throws -> FileEventStore {
    // snippet
    let store = try FileEventStore(
        directory: directory,
        options: .init(retention: .afterSnapshots(2))
    )
    // end snippet
    return store
}

@Test func aStoreRetainingTwoSnapshotsRefusesReadsFromBelowTheOlderOne() async throws {
    let directory = try ScratchDirectory()
    let store = try openRetaining(directory: directory.path)
    for version in 1...3 as ClosedRange<UInt64> {
        _ = try await store.append([[UInt8(version)]], to: "order-17", expecting: version - 1)
        try await store.save(Snapshot(stream: "order-17", version: version, payload: []))
    }
    // Snapshots at 1, 2 and 3: the latest two are at 2 and 3, so the events after 2 are kept.
    #expect(try await store.read("order-17", after: 2, limit: 10).map(\.payload) == [[3]])
    await #expect(throws: EventStoreError.self) { try await store.read("order-17", after: 1, limit: 10) }
    await store.close()
}

// snippet
/// A meter's events, packed by hand: a case number, then that case's values, in order.
enum MeterEvent: Packable, Equatable, Sendable {
    case reading(Int)
    case reset(reason: String)

    func pack(into packer: inout Packer) {
        switch self {
        case .reading(let value):
            packer.pack(case: 0)
            packer.pack(value)
        case .reset(let reason):
            packer.pack(case: 1)
            packer.pack(reason)
        }
    }

    init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        switch try unpacker.unpackCase() {
        case 0: self = .reading(try unpacker.unpack())
        case 1: self = .reset(reason: try unpacker.unpack())
        case let other: throw unpacker.unknownCase(other, of: MeterEvent.self)
        }
    }
}

let meterProgram = DurableProgram<Int, MeterEvent, Never>(
    initial: 0,
    update: Update { total, event in
        switch event {
        case .reading(let value): total += value
        case .reset: total = 0
        }
        return []
    }
)

func meters(on store: any EventStore) -> DurableLoopGroup<String, Int, MeterEvent, Never> {
    DurableLoopGroup(
        program: meterProgram,
        effects: EffectRouter(),
        store: store,
        events: PackedCodec<MeterEvent>(),
        states: PackedCodec<Int>()
    )
}
// end snippet

@Test func packedEventsAreTheirFewBytesAndComeBackAfterARestart() async throws {
    #expect(PackedCodec<MeterEvent>().encode(.reading(3)) == [0, 6])
    let damaged = try #require(throws: CodecError.self) { try PackedCodec<MeterEvent>().decode([2]) }
    #expect(damaged.description == "cannot decode MeterEvent: at byte 0 of 1: no case 2 in MeterEvent")
    let store = InMemoryEventStore()
    for expected in [5, 12] {
        let group = meters(on: store)
        let running = Task { try await group.run() }
        _ = try await group.sendDurably(.reading(expected == 5 ? 5 : 7), to: "meter-1")
        #expect(try await group.durableState(of: "meter-1") == expected)
        group.stop()
        _ = try await running.value
    }
}

// snippet
enum Wallet {
    struct State: Codable, Equatable, Sendable { var balance = 0 }
    enum Event: Codable, Sendable { case deposit(Int) }

    /// Release 1 charged a fee of 1 a deposit.
    static func feeOfOne(_ state: inout State, _ event: Event) -> [Never] {
        guard case .deposit(let amount) = event else { return [] }
        state.balance += amount - 1
        return []
    }

    /// Release 2 charges 2, from now on.
    static func feeOfTwo(_ state: inout State, _ event: Event) -> [Never] {
        guard case .deposit(let amount) = event else { return [] }
        state.balance += amount - 2
        return []
    }

    static let program = DurableProgram(initial: State(), update: Update(feeOfTwo), revision: 2)
        .replaying(revision: 1, with: Update(feeOfOne))
}
// end snippet

@Test func aNewReleaseRecoversWhatTheOldOneAcknowledged() async throws {
    let store = InMemoryEventStore()
    func deposit(
        _ amount: Int,
        with program: DurableProgram<Wallet.State, Wallet.Event, Never>
    ) async throws
        -> Wallet.State
    {
        let wallet = DurableLoop(
            stream: "wallet-1",
            program: program,
            effects: EffectRouter(),
            store: store,
            snapshotEvery: nil
        )
        let running = Task { try await wallet.run() }
        _ = try await wallet.sendDurably(.deposit(amount))
        let state = try await wallet.durableState()
        wallet.stop()
        _ = try await running.value
        return state
    }
    let releaseOne = DurableProgram(initial: Wallet.State(), update: Update(Wallet.feeOfOne))
    #expect(try await deposit(10, with: releaseOne) == Wallet.State(balance: 9))
    // Release 2 recovers 9, not 8, and charges its own fee on the next deposit.
    #expect(try await deposit(10, with: Wallet.program) == Wallet.State(balance: 17))
}

// snippet
/// Release 1's event, as the store holds it.
enum WalletEventV1: Codable, Sendable { case deposit(Int) }

/// Release 2 renamed the case.
enum WalletEvent: Codable, Equatable, Sendable { case credited(Int) }

let walletEvents = VersionedCodec(version: 2, codec: BinaryCodec<WalletEvent>())
    .upcasting(VersionedCodec(version: 1, codec: BinaryCodec<WalletEventV1>())) { old in
        switch old {
        case .deposit(let amount): .credited(amount)
        }
    }
// end snippet

@Test func anEventReleaseOneStoredIsReadInReleaseTwosForm() throws {
    let stored = try BinaryCodec<WalletEventV1>().encode(.deposit(10))
    #expect(try walletEvents.decode(stored) == .credited(10))
    // What release 2 writes says so, and reads back.
    #expect(try walletEvents.decode(try walletEvents.encode(.credited(5))) == .credited(5))
}
