import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

/// An account answering its callers: deposits always succeed, a withdrawal past the balance is refused.
enum Account {
    enum Outcome: Codable, Hashable, Sendable {
        case done(balance: Int)
        case insufficient(balance: Int)
    }

    enum Event: Codable, Hashable, Sendable {
        case deposit(Int, replyTo: ReplyTo<Outcome>)
        case withdraw(Int, replyTo: ReplyTo<Outcome>)
        /// Asks for an audit; answered later, when the audit reports back.
        case audit(replyTo: ReplyTo<Outcome>)
        case audited
        /// A faulty update: answers twice.
        case answerTwice(replyTo: ReplyTo<Outcome>)
        /// Never answered.
        case ignore(replyTo: ReplyTo<Outcome>)
        case note(Int)
    }

    struct State: Codable, Equatable, Sendable {
        var balance = 0
        var auditing: [ReplyTo<Outcome>] = []
        var notes: [Int] = []
    }

    enum Effect: Equatable, Sendable {
        case answer(Reply<Outcome>)
        case runAudit
    }

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
        case .audit(let replyTo):
            state.auditing.append(replyTo)
            return [.runAudit]
        case .audited:
            defer { state.auditing = [] }
            return state.auditing.map { .answer($0.reply(.done(balance: state.balance))) }
        case .answerTwice(let replyTo):
            return [.answer(replyTo.reply(.done(balance: 1))), .answer(replyTo.reply(.done(balance: 2)))]
        case .ignore:
            return []
        case .note(let value):
            state.notes.append(value)
            return []
        }
    }

    static let program = DurableProgram(initial: State(), update: Update(update))
        .replying { if case .answer(let reply) = $0 { reply } else { nil } }

    /// Audits report back at once.
    static let router = EffectRouter<Effect, Event>()
        .route({ $0 == .runAudit ? () : nil }, to: ClosureSyncEffectHandler { _, send in send(.audited) })

    typealias Group = DurableLoopGroup<String, State, Event, Effect>
    typealias Durable = DurableState<State, Event, Effect>
}

/// A store whose appends wait while it is held.
final class GatedStore: EventStore {
    let inner = InMemoryEventStore()
    private let gate = Locked<(held: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))
    let appends = Locked(0)

    func hold() { gate.withLock { $0.held = true } }

    func release() {
        let waiting = gate.withLock { gate in
            defer { gate = (false, []) }
            return gate.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    var waitingAppends: Int { gate.withLock { $0.waiting.count } }

    func append(_ payloads: [[UInt8]], to stream: String, expecting expectedVersion: UInt64) async throws -> UInt64 {
        await withCheckedContinuation { continuation in
            let held = gate.withLock { gate in
                if gate.held { gate.waiting.append(continuation) }
                return gate.held
            }
            if !held { continuation.resume() }
        }
        appends.withLock { $0 += 1 }
        return try await inner.append(payloads, to: stream, expecting: expectedVersion)
    }

    func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
        try await inner.read(stream, after: version, limit: limit)
    }

    func version(of stream: String) async throws -> UInt64 { try await inner.version(of: stream) }
    func save(_ snapshot: Snapshot) async throws { try await inner.save(snapshot) }
    func latestSnapshot(of stream: String) async throws -> Snapshot? { try await inner.latestSnapshot(of: stream) }
}

@Suite struct DurableRequestTests {
    let update = Account.program.durableUpdate(snapshotEvery: nil)

    func running() -> Account.Durable {
        var durable = Account.Durable(stream: "a", initial: .init(), keysKept: 3)
        _ = update(&durable, .recovered(.init(), version: 0, snapshot: 0))
        return durable
    }

    static func bytes(_ outcome: Account.Outcome) -> [UInt8] {
        (try? BinaryCodec<Account.Outcome>().encode(outcome)) ?? []
    }

    // MARK: The durable update, as values

    @Test func aReplyIsReleasedOnlyOnceItsEventIsRecorded() {
        var durable = running()
        let replyTo = ReplyTo<Account.Outcome>(id: 7)
        let deposit = Account.Event.deposit(5, replyTo: replyTo)
        #expect(
            update(&durable, .call(DurableCall(event: deposit, reply: 7, ticket: 1)))
                == [.append(stream: "a", events: [deposit], expecting: 0, snapshot: nil)]
        )
        #expect(durable.state.balance == 5)
        let answer = Account.Effect.answer(replyTo.reply(.done(balance: 5)))
        #expect(
            update(&durable, .recorded(upTo: 1))
                == [
                    .reply(
                        answer,
                        stream: "a",
                        delivery: ReplyDelivery(reply: 7, value: Account.Outcome.done(balance: 5))
                    )
                ]
        )
    }

    @Test func aReplyWhoseEventIsNeverRecordedIsDroppedAndCounted() {
        var durable = running()
        _ = update(&durable, .call(DurableCall(event: .deposit(5, replyTo: ReplyTo(id: 7)), reply: 7, ticket: 1)))
        #expect(
            update(&durable, .failed(DurableFailure(.storeError("disk full"), stream: "a"))) == [
                .fail(stream: "a", tickets: [], reason: DurableFailure(.storeError("disk full"), stream: "a")), .stop,
            ]
        )
        #expect(durable.droppedReplies == 1)
    }

    @Test func aRepeatedKeyIsAnsweredFromTheRecordAndNotApplied() {
        var durable = running()
        let replyTo = ReplyTo<Account.Outcome>(id: 99)
        let deposit = Account.Event.deposit(5, replyTo: replyTo)
        let call = DurableCall(event: deposit, key: "k1", fingerprint: 11, reply: 99, ticket: 1)
        let answer = RecordedAnswer(reply: 99, version: 1, payload: .success(Self.bytes(.done(balance: 5))))
        let entry = KeyWindow.Entry(key: "k1", version: 1, fingerprint: 11, reply: 99)
        // The key and the answer are recorded with the event that decided it.
        #expect(
            update(&durable, .call(call)) == [
                .append(
                    stream: "a",
                    events: [deposit],
                    expecting: 0,
                    snapshot: nil,
                    notes: [0: EventNote(key: entry, answers: [answer])]
                )
            ]
        )
        // A repeat before the event is recorded waits for the first answer, on the same address.
        #expect(update(&durable, .call(call)).isEmpty)
        _ = update(&durable, .recorded(upTo: 1))
        // After, it gets the recorded answer; nothing is applied again.
        #expect(
            update(&durable, .call(call)) == [
                .answer(
                    stream: "a",
                    delivery: ReplyDelivery(reply: 99, recorded: answer.payload, decode: { _ in .success(0) })
                )
            ]
        )
        #expect(durable.state.balance == 5 && durable.version == 1 && durable.repeated == 2)
        // The same key with another event is refused.
        var other = call
        other.fingerprint = 12
        #expect(
            update(&durable, .call(other)) == [.refuse(stream: "a", ticket: 1, reply: 99, reason: .keyReused("k1"))]
        )
    }

    @Test func anotherEventUnderAKeyWaitsOnAnotherAddressAndARepeatOnTheSame() async throws {
        // The address is derived from the stream, the key and the event: a repeat shares it (in any
        // process); another event under the key never receives the first one's answer, even when the
        // answer is delivered before the loop has seen the second event.
        let requesters = Requesters(clock: ContinuousClock())
        let sent = Locked<[DurableCall<Int>]>([])
        func ask(_ amount: Int) -> Task<Int, any Error> {
            Task {
                try await requesters.ask(
                    stream: "a",
                    key: "k",
                    timeout: nil,
                    make: { (replyTo: ReplyTo<Int>) in amount * 1_000 + (replyTo.id == 0 ? 0 : 1) },
                    fingerprint: { UInt64($0) },
                    deliver: { call in
                        sent.withLock { $0.append(call) }
                        return .accepted
                    },
                    refusal: { .rejected($0) }
                )
            }
        }
        let first = ask(1)
        await eventually("the first is sent") { sent.withLock { $0.count } == 1 }
        let second = ask(2)
        let repeated = ask(1)
        await eventually("all are sent") { sent.withLock { $0.count } == 3 }
        let calls = sent.withLock { $0 }
        let (a, b) = (calls.first { $0.event == 1_001 }, calls.first { $0.event == 2_001 })
        // Digests are taken with the placeholder address 0.
        #expect(a?.fingerprint == 1_000 && b?.fingerprint == 2_000)
        #expect(a?.reply == keyedReply(stream: "a", key: "k", event: 1_000))
        #expect(a?.reply != b?.reply)
        requesters.deliver(ReplyDelivery(reply: a?.reply ?? 0, value: 10), in: "a")
        let (answered, repeatAnswered) = (try await first.value, try await repeated.value)
        #expect(answered == 10 && repeatAnswered == 10)
        requesters.refuse(b?.ticket ?? 0, reply: b?.reply ?? 0, in: "a", with: .keyReused("k"))
        await #expect(throws: RequestError.keyReused("k")) { try await second.value }
    }

    /// The caller turns the delivery into the type it asked for: an answer of another type, or a
    /// recorded answer that does not decode, ends its wait with an error that says so.
    @Test func anAnswerOfAnotherTypeOrOneThatDoesNotDecodeIsAnError() async throws {
        let requesters = Requesters(clock: ContinuousClock())
        let sent = Locked<[DurableCall<Int>]>([])
        func ask() -> Task<Int, any Error> {
            Task {
                try await requesters.ask(
                    stream: "a",
                    key: nil,
                    timeout: nil,
                    make: { (replyTo: ReplyTo<Int>) in Int(replyTo.id % 1_000) },
                    fingerprint: { UInt64($0) },
                    deliver: { call in
                        sent.withLock { $0.append(call) }
                        return .accepted
                    },
                    refusal: { .rejected($0) }
                )
            }
        }
        let mistyped = ask()
        await eventually("it is sent") { sent.withLock { $0.count } == 1 }
        requesters.deliver(ReplyDelivery(reply: sent.withLock { $0[0].reply } ?? 0, value: "ten"), in: "a")
        await #expect(throws: RequestError.invalid("the program replies with String, not the Int this request expects"))
        {
            try await mistyped.value
        }
        let undecodable = ask()
        await eventually("it is sent") { sent.withLock { $0.count } == 2 }
        let broken = ReplyDelivery(
            reply: sent.withLock { $0[1].reply } ?? 0,
            recorded: .success([0xFF]),
            decode: { _ in .failure(CodecError("cannot decode Int")) }
        )
        requesters.deliver(broken, in: "a")
        await #expect(throws: RequestError.storeFailed("the recorded answer does not decode: cannot decode Int")) {
            try await undecodable.value
        }
    }

    @Test func aRepeatedKeyOfASenderGetsTheFirstVersionOnceDurable() {
        var durable = running()
        let call = DurableCall(event: Account.Event.note(1), key: "n", fingerprint: 3, ticket: 1)
        _ = update(&durable, .call(call))
        var again = call
        again.ticket = 2
        #expect(update(&durable, .call(again)).isEmpty)
        #expect(
            update(&durable, .recorded(upTo: 1)) == [
                .acknowledge([.init(ticket: 1, version: 1), .init(ticket: 2, version: 1)])
            ]
        )
        again.ticket = 3
        #expect(update(&durable, .call(again)) == [.acknowledge([.init(ticket: 3, version: 1)])])
        #expect(durable.state.notes == [1])
    }

    @Test func aSecondReplyToAnsweredRequestIsIgnoredAndCounted() {
        var durable = running()
        let replyTo = ReplyTo<Account.Outcome>(id: 5)
        let call = DurableCall(event: Account.Event.answerTwice(replyTo: replyTo), key: "t", fingerprint: 1, reply: 5)
        _ = update(&durable, .call(call))
        #expect(
            update(&durable, .recorded(upTo: 1)) == [
                .reply(
                    .answer(replyTo.reply(.done(balance: 1))),
                    stream: "a",
                    delivery: ReplyDelivery(reply: 5, value: 0)
                )
            ]
        )
        #expect(durable.duplicateReplies == 1)
    }

    @Test func theWindowKeepsTheNewestKeysAndSnapshotsCarryIt() {
        var durable = running()
        for index in 1...5 {
            _ = update(&durable, .call(DurableCall(event: .note(index), key: "k\(index)", fingerprint: UInt64(index))))
            _ = update(&durable, .recorded(upTo: UInt64(index)))
        }
        #expect(durable.keys.all.map(\.key) == ["k3", "k4", "k5"])
        // The oldest key is forgotten: a repeat of it is a new event.
        _ = update(&durable, .call(DurableCall(event: .note(1), key: "k1", fingerprint: 1)))
        #expect(durable.state.notes == [1, 2, 3, 4, 5, 1])
        let snapshotting = Account.program.durableUpdate(snapshotEvery: 1)
        var other = running()
        let effects = snapshotting(&other, .call(DurableCall(event: .note(9), key: "s", fingerprint: 9)))
        #expect(
            effects == [
                .append(
                    stream: "a",
                    events: [.note(9)],
                    expecting: 0,
                    snapshot: other.state,
                    notes: [0: EventNote(key: .init(key: "s", version: 1, fingerprint: 9, reply: 0))],
                    keys: other.keys
                )
            ]
        )
    }

    @Test func aReadWaitsForEveryEventBeforeItAndSeesOnlyRecordedOnes() {
        var durable = running()
        _ = update(&durable, .event(.note(1), ticket: nil))
        // The first append is under way; a read now waits for it, and the state it made.
        #expect(update(&durable, .read(ticket: 4)).isEmpty)
        _ = update(&durable, .event(.note(2), ticket: nil))
        let released = update(&durable, .recorded(upTo: 1))
        #expect(released.contains(.read(tickets: [4], state: Account.State(notes: [1]))))
        // A read while nothing is on its way is answered at once.
        _ = update(&durable, .recorded(upTo: 2))
        #expect(update(&durable, .read(ticket: 5)) == [.read(tickets: [5], state: Account.State(notes: [1, 2]))])
    }

    @Test func aReadWhileRecoveringWaitsForTheCallsHeldBeforeItToBeRecorded() {
        var durable = Account.Durable(stream: "a", initial: .init())
        _ = update(&durable, .read(ticket: 1))
        _ = update(&durable, .event(.note(1), ticket: nil))
        _ = update(&durable, .read(ticket: 2))
        _ = update(&durable, .event(.note(2), ticket: nil))
        let effects = update(&durable, .recovered(Account.State(balance: 3), version: 4, snapshot: 0))
        // The first asked before any held event: the recovered state, at once.
        #expect(effects.contains(.read(tickets: [1], state: Account.State(balance: 3))))
        #expect(effects.count == 2)
        // The second waits for the event held before it to be recorded (and sees the batch it went in).
        #expect(
            update(&durable, .recorded(upTo: 6)) == [
                .read(tickets: [2], state: Account.State(balance: 3, notes: [1, 2]))
            ]
        )
    }

    @Test func aReplyFromResumeNeverReplacesARecordedAnswer() {
        let resuming = DurableProgram(initial: Account.State(), update: Update(Account.update)) { state in
            state.auditing.map { .answer($0.reply(.done(balance: 99))) }
        }
        .replying { if case .answer(let reply) = $0 { reply } else { nil } }
        .durableUpdate(snapshotEvery: nil)
        var durable = Account.Durable(stream: "a", initial: .init())
        let recorded = RecordedAnswer(reply: 42, version: 1, payload: .success([1]))
        let keys = KeyWindow(
            capacity: 10,
            entries: [.init(key: "k", version: 1, fingerprint: 1, reply: 42, answer: recorded)]
        )
        let state = Account.State(auditing: [ReplyTo(id: 42), ReplyTo(id: 43)])
        let reply = Account.Effect.answer(ReplyTo<Account.Outcome>(id: 43).reply(.done(balance: 99)))
        #expect(
            resuming(&durable, .recovered(state, version: 1, snapshot: 0, keys: keys))
                == [.reply(reply, stream: "a", delivery: ReplyDelivery(reply: 43, value: 0))]
        )
        #expect(durable.duplicateReplies == 1)
    }

    @Test func aRequestToAProgramWithoutRepliesIsRefused() {
        let plain = DurableProgram(initial: Account.State(), update: Update(Account.update)).durableUpdate(
            snapshotEvery: nil
        )
        var durable = Account.Durable(stream: "a", initial: .init())
        _ = plain(&durable, .recovered(.init(), version: 0, snapshot: 0))
        #expect(
            plain(&durable, .call(DurableCall(event: .note(1), reply: 3, ticket: 8)))
                == [.refuse(stream: "a", ticket: 8, reply: 3, reason: .noReplies)]
        )
    }

    // MARK: Running

    @Test func aRequestIsAnsweredOnlyOnceItsEventIsDurable() async throws {
        let store = GatedStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        #expect(try await accounts.request(to: "a") { .deposit(1, replyTo: $0) } == .done(balance: 1))
        store.hold()
        let answered = Locked(false)
        let request = Task {
            defer { answered.withLock { $0 = true } }
            return try await accounts.request(to: "a") { .deposit(5, replyTo: $0) }
        }
        await eventually("the append waits") { store.waitingAppends == 1 }
        // Applied (the live state shows it) but not durable: no answer yet, and no durable read either.
        #expect(accounts.state(of: "a")?.balance == 6)
        let read = Locked(false)
        let reading = Task {
            defer { read.withLock { $0 = true } }
            return try await accounts.durableState(of: "a")
        }
        // Both wait for the append: the event is applied and will be recorded, but is not yet.
        await eventually("the read is applied") { accounts.underlying.state(of: "a")?.reads.count == 1 }
        #expect(!answered.withLock { $0 } && !read.withLock { $0 })
        store.release()
        #expect(try await request.value == .done(balance: 6))
        #expect(try await store.version(of: "a") == 2)
        #expect(try await reading.value.balance == 6)
        accounts.stop()
        _ = try await running.value
    }

    @Test func repliesFollowTheirRequestsThroughLaterEventsAndRefusals() async throws {
        let store = InMemoryEventStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        #expect(try await accounts.request(to: "a") { .withdraw(3, replyTo: $0) } == .insufficient(balance: 0))
        _ = try await accounts.request(to: "a") { .deposit(10, replyTo: $0) }
        // Answered by the event the audit's handler sends back, not by the request's own.
        #expect(try await accounts.request(to: "a") { .audit(replyTo: $0) } == .done(balance: 10))
        // A reply the update returns twice reaches the caller once; the second is counted as dropped.
        #expect(try await accounts.request(to: "a") { .answerTwice(replyTo: $0) } == .done(balance: 1))
        await eventually("the second reply is counted") { accounts.droppedReplies == 1 }
        // For a keyed request the second is not even released: the first is the recorded answer.
        #expect(try await accounts.request(to: "a", key: "twice") { .answerTwice(replyTo: $0) } == .done(balance: 1))
        #expect(accounts.underlying.state(of: "a")?.duplicateReplies == 1)
        #expect(accounts.droppedReplies == 1)
        accounts.stop()
        _ = try await running.value
    }

    @Test func concurrentRepeatsOfAKeyApplyOnceAndGetOneAnswer() async throws {
        let store = InMemoryEventStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        let answers = try await withThrowingTaskGroup(of: Account.Outcome.self) { group in
            for _ in 0..<8 {
                group.addTask { try await accounts.request(to: "a", key: "pay-1") { .deposit(5, replyTo: $0) } }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers == Array(repeating: .done(balance: 5), count: 8))
        #expect(try await accounts.durableState(of: "a").balance == 5)
        #expect(try await store.version(of: "a") == 1)
        accounts.stop()
        _ = try await running.value
    }

    @Test func aRepeatAfterARestartGetsTheRecordedAnswer() async throws {
        let store = InMemoryEventStore()
        let first = Account.Group(program: Account.program, effects: Account.router, store: store, snapshotEvery: 2)
        let running = Task { try await first.run() }
        #expect(try await first.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await first.sendDurably(.note(1), to: "a", key: "n1") == 2)
        #expect(try await first.request(to: "a", key: "w1") { .withdraw(2, replyTo: $0) } == .done(balance: 3))
        first.stop()
        _ = try await running.value
        #expect(try await store.latestSnapshot(of: "a")?.version == 2)

        // A new process: from the snapshot (keys d1 and n1) and the event after it (key w1).
        let second = Account.Group(program: Account.program, effects: Account.router, store: store, snapshotEvery: 2)
        let again = Task { try await second.run() }
        #expect(try await second.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await second.request(to: "a", key: "w1") { .withdraw(2, replyTo: $0) } == .done(balance: 3))
        #expect(try await second.sendDurably(.note(1), to: "a", key: "n1") == 2)
        await #expect(throws: RequestError.keyReused("d1")) {
            try await second.request(to: "a", key: "d1") { .deposit(6, replyTo: $0) }
        }
        await #expect(throws: DurableLoopError.keyReused("n1")) {
            try await second.sendDurably(.note(2), to: "a", key: "n1")
        }
        #expect(try await second.durableState(of: "a") == Account.State(balance: 3, notes: [1]))
        #expect(try await store.version(of: "a") == 3)
        second.stop()
        _ = try await again.value
    }

    @Test func aGracefulStopWaitsForAnAppendTheFileStoreIsWritingAndTheCallerIsAnswered() async throws {
        // On the file store an append holds no task: the store's writer ends it. The stop must still
        // wait for it, and the request be answered, not failed as ended.
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        io.counts.withLock { $0.holdFirstWrite = true }
        let store = try FileEventStore(directory: directory.path, io: io)
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        let asked = Task { try await accounts.request(to: "a", key: "d") { .deposit(5, replyTo: $0) } }
        await eventually("the append is being written") { io.counts.withLock { $0.writes } == 1 }
        accounts.stop()
        io.release()
        #expect(try await asked.value == .done(balance: 5))
        let report = try await running.value
        #expect(report.eventsProcessed == 1)
        #expect(try await store.version(of: "a") == 1)
        await store.close()
    }

    @Test func anotherEventUnderAKeyInFlightIsRefusedAndNeverGetsItsAnswer() async throws {
        let store = GatedStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        _ = try await accounts.request(to: "a") { .deposit(100, replyTo: $0) }
        store.hold()
        let first = Task { try await accounts.request(to: "a", key: "k") { .withdraw(50, replyTo: $0) } }
        await eventually("the first is applied") { accounts.underlying.state(of: "a")?.version == 2 }
        await #expect(throws: RequestError.keyReused("k")) {
            try await accounts.request(to: "a", key: "k") { .withdraw(500, replyTo: $0) }
        }
        store.release()
        #expect(try await first.value == .done(balance: 50))
        accounts.stop()
        _ = try await running.value
    }

    @Test func aReplyFromResumeReachesARepeatAfterARestart() async throws {
        let store = InMemoryEventStore()
        // Audits never report back in the first process.
        let silent = EffectRouter<Account.Effect, Account.Event>()
            .route({ $0 == .runAudit ? () : nil }, to: ClosureSyncEffectHandler { _, _ in })
        let first = Account.Group(program: Account.program, effects: silent, store: store)
        let running = Task { try await first.run() }
        let asked = Task { try await first.request(to: "a", key: "au") { .audit(replyTo: $0) } }
        await eventually("the audit is recorded") { first.underlying.state(of: "a")?.recorded == 1 }
        first.stop()
        await #expect(throws: RequestError.loopStopped) { try await asked.value }
        _ = try await running.value
        // The next process's program answers the audits it finds waiting, as it starts.
        let resuming = DurableProgram(initial: Account.State(), update: Update(Account.update)) { state in
            state.auditing.map { .answer($0.reply(.done(balance: state.balance))) }
        }
        .replying { if case .answer(let reply) = $0 { reply } else { nil } }
        let second = Account.Group(program: resuming, effects: silent, store: store)
        let again = Task { try await second.run() }
        #expect(
            try await second.request(to: "a", key: "au", timeout: .seconds(30)) { .audit(replyTo: $0) }
                == .done(balance: 0)
        )
        #expect(try await store.version(of: "a") == 1)
        second.stop()
        _ = try await again.value
    }

    @Test func badKeysAndBrokenStreamsAreClearErrors() async throws {
        let store = InMemoryEventStore()
        _ = try await store.append([[0xFF, 0x45, 0x4C, 9]], to: "broken", expecting: 0)
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        let long = String(repeating: "k", count: 10_000)
        await #expect(throws: RequestError.invalid("a key of 10000 bytes, past the limit of 1024")) {
            try await accounts.request(to: "a", key: long) { .deposit(1, replyTo: $0) }
        }
        #expect(accounts.send(.note(1), to: "a", key: long) == .rejected(.invalid))
        await #expect(throws: DurableLoopError.invalid("an empty key")) {
            try await accounts.sendDurably(.note(1), to: "a", key: "")
        }
        // A stream whose events no longer decode: the request fails naming the stream and version.
        do {
            _ = try await accounts.request(to: "broken", key: "x") { .deposit(1, replyTo: $0) }
            Issue.record("a broken stream answered")
        } catch {
            guard case .storeFailed(let reason) = error else { throw error }
            #expect(reason.contains("stream 'broken': the event at version 1 does not decode"))
        }
        await #expect(throws: RequestError.self) {
            try await accounts.request(to: "broken") { .deposit(1, replyTo: $0) }
        }
        #expect(try await accounts.request(to: "a") { .deposit(1, replyTo: $0) } == .done(balance: 1))
        accounts.stop()
        _ = try await running.value
    }

    @Test func aRequestWhoseStoreFailsGetsTheStoresError() async throws {
        let store = CountingStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await accounts.run() }
        #expect(try await accounts.request(to: "a") { .deposit(1, replyTo: $0) } == .done(balance: 1))
        store.failAppends.withLock { $0 = true }
        do {
            _ = try await accounts.request(to: "a", key: "k") { .deposit(1, replyTo: $0) }
            Issue.record("answered without a store")
        } catch {
            guard case .storeFailed(let reason) = error else { throw error }
            #expect(reason.contains("write to disk"))
        }
        accounts.stop()
        _ = try await running.value
    }

    @Test func timeoutsStopsAndCancellationsEndEveryWait() async throws {
        let clock = ManualClock()
        let accounts = Account.Group(
            program: Account.program,
            effects: Account.router,
            store: InMemoryEventStore(),
            clock: clock
        )
        let running = Task { try await accounts.run() }
        let timed = Task { try await accounts.request(to: "a", timeout: .seconds(2)) { .ignore(replyTo: $0) } }
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(2))
        await #expect(throws: RequestError.timedOut(after: .seconds(2))) { try await timed.value }
        let before = accounts.underlying.state(of: "a")?.version ?? 0
        let cancelled = Task { try await accounts.request(to: "a", key: "c") { .ignore(replyTo: $0) } }
        await eventually("the request is applied") { accounts.underlying.state(of: "a")?.version == before + 1 }
        cancelled.cancel()
        await #expect(throws: RequestError.cancelled) { try await cancelled.value }
        let stopped = Task { try await accounts.request(to: "b") { .ignore(replyTo: $0) } }
        await eventually("the request is applied") { accounts.state(of: "b") != nil }
        accounts.stop()
        await #expect(throws: RequestError.loopStopped) { try await stopped.value }
        _ = try await running.value
        await #expect(throws: RequestError.rejected(.stopped)) {
            try await accounts.request(to: "a") { .deposit(1, replyTo: $0) }
        }
    }

    @Test func deadlinesOfManyRequestsExpireInOrderOnOneTimer() async throws {
        let clock = ManualClock()
        let accounts = Account.Group(
            program: Account.program,
            effects: Account.router,
            store: InMemoryEventStore(),
            clock: clock
        )
        let running = Task { try await accounts.run() }
        let expired = Locked<[Int]>([])
        var waits: [Task<Void, Never>] = []
        for seconds in [3, 1, 2] {
            waits.append(
                Task {
                    do {
                        _ = try await accounts.request(to: "a", timeout: .seconds(seconds)) { .ignore(replyTo: $0) }
                    } catch {
                        if error as? RequestError == .timedOut(after: .seconds(seconds)) {
                            expired.withLock { $0.append(seconds) }
                        }
                    }
                }
            )
        }
        // Answered before its deadline: never timed out, and its deadline wakes nobody.
        let answered = Task { try await accounts.request(to: "a", timeout: .seconds(1)) { .deposit(1, replyTo: $0) } }
        #expect(try await answered.value == .done(balance: 1))
        // Each request's deadline is set before its event is sent: once all four are applied, all are set.
        await eventually("every request is applied") { accounts.underlying.state(of: "a")?.version == 4 }
        for expected in [[1], [1, 2], [1, 2, 3]] {
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(1))
            await eventually("\(expected) expired") { expired.withLock { $0 } == expected }
        }
        for wait in waits { await wait.value }
        accounts.stop()
        _ = try await running.value
    }

    @Test func oneHundredThousandKeysKeepTheWindowBounded() async throws {
        let store = InMemoryEventStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store, keysKept: 1_000)
        let running = Task { try await accounts.run() }
        for index in 0..<100_000 { accounts.send(.note(index), to: "a", key: "key-\(index)") }
        #expect(try await accounts.durableState(of: "a").notes.count == 100_000)
        #expect(accounts.underlying.state(of: "a")?.keys.count == 1_000)
        #expect(accounts.underlying.state(of: "a")?.keys.all.first?.key == "key-99000")
        // Within the window a repeat is not applied; past it, it is a new event.
        accounts.send(.note(-1), to: "a", key: "key-99999")
        accounts.send(.note(-2), to: "a", key: "key-0")
        #expect(try await accounts.durableState(of: "a").notes.suffix(2) == [99_999, -2])
        accounts.stop()
        _ = try await running.value
    }

    @Test func durableStateRecoversAnEntityAndNeverShowsTheInitialState() async throws {
        let store = InMemoryEventStore()
        let first = Account.Group(program: Account.program, effects: Account.router, store: store)
        let running = Task { try await first.run() }
        _ = try await first.request(to: "a") { .deposit(5, replyTo: $0) }
        first.stop()
        _ = try await running.value
        let second = Account.Group(program: Account.program, effects: Account.router, store: store)
        let again = Task { try await second.run() }
        #expect(try await second.durableState(of: "a").balance == 5)
        #expect(try await second.durableState(of: "new") == Account.State())
        second.stop()
        _ = try await again.value
    }

    @Test func eachEntityRunsItsOwnProgramAndTheObserverSeesItsActivity() async throws {
        let observer = RecordingGroupObserver<String, Account.Event, Account.Effect>()
        let accounts = Account.Group(
            program: { id in
                DurableProgram(initial: Account.State(balance: id == "rich" ? 100 : 0), update: Update(Account.update))
                    .replying { if case .answer(let reply) = $0 { reply } else { nil } }
            },
            effects: Account.router,
            store: InMemoryEventStore(),
            observer: observer
        )
        let running = Task { try await accounts.run() }
        #expect(try await accounts.request(to: "rich") { .withdraw(50, replyTo: $0) } == .done(balance: 50))
        #expect(try await accounts.request(to: "poor") { .withdraw(50, replyTo: $0) } == .insufficient(balance: 0))
        accounts.stop()
        let report = try await running.value
        let processed = observer.processed
        #expect(processed.map(\.entity) == ["rich", "poor"])
        // The group's end shows the programs' report, as run() returns it.
        let ends = observer.seen.withLock { seen in
            seen.compactMap { activity, entity -> LoopReport? in
                if entity == nil, case .stopped(let report) = activity { report } else { nil }
            }
        }
        #expect(ends == [report])
        #expect(report.eventsProcessed == 2)
        #expect(processed.allSatisfy { if case .withdraw = $0.event { true } else { false } })
    }

    @Test func theReportCountsTheProgramsWorkAndTheStoresApart() async throws {
        let store = InMemoryEventStore()
        let accounts = Account.Group(program: Account.program, effects: Account.router, store: store, snapshotEvery: 2)
        let running = Task { try await accounts.run() }
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        await #expect(throws: RequestError.keyReused("d1")) {
            try await accounts.request(to: "a", key: "d1") { .deposit(6, replyTo: $0) }
        }
        #expect(try await accounts.request(to: "b") { .audit(replyTo: $0) } == .done(balance: 0))
        #expect(try await accounts.sendDurably(.note(1), to: "b") == 3)
        #expect(try await accounts.durableState(of: "b").notes == [1])
        accounts.stop()
        let report = try await running.value
        // The programs were sent 6 events: the deposit, its repeat and the refused call (taken, not
        // applied), the audit, its report, the note. Their effects: the deposit's answer, the audit, its
        // answer.
        #expect(report.eventsProcessed == 6)
        #expect(report.eventsSent == 6)
        #expect(report.effectsStarted == 3)
        #expect(report.effectsCompleted == 3)
        #expect(report.ending == .drained)
        #expect(accounts.report == report)
        let work = accounts.storeWork
        #expect(work.recoveries == 2)
        #expect(work.eventsAppended == 4)
        #expect(work.appends >= 2 && work.appends <= 4)
        #expect(work.snapshotsSaved >= 1)
        #expect(work.callsRepeated == 1)
        #expect(work.callsRefused == 1)
        #expect(work.failures == 0)
        // Two recoveries, an acknowledgement, an answer from the record, a refusal, a read, and the appends.
        #expect(work.tasksRun == 2 + 1 + 1 + 1 + 1 + work.appends)
        // What the underlying group counted is both.
        #expect(accounts.underlying.report.eventsProcessed == report.eventsProcessed + work.inputsProcessed)
        #expect(accounts.underlying.report.effectsStarted == report.effectsStarted + work.tasksRun)
    }

    @Test func aDurableLoopsReportAndObserverSeeOnlyTheProgram() async throws {
        let observer = RecordingObserver<Account.Event, Account.Effect>()
        let loop = DurableLoop(
            stream: "a",
            program: Account.program,
            effects: Account.router,
            store: InMemoryEventStore(),
            observer: observer
        )
        let running = Task { try await loop.run() }
        #expect(try await loop.request(key: "w") { .withdraw(1, replyTo: $0) } == .insufficient(balance: 0))
        #expect(try await loop.request(key: "w") { .withdraw(1, replyTo: $0) } == .insufficient(balance: 0))
        loop.stop()
        let report = try await running.value
        #expect(report.eventsProcessed == 2)
        #expect(report.effectsStarted == 1)
        #expect(loop.storeWork.callsRepeated == 1)
        #expect(loop.storeWork.appends == 1)
        #expect(observer.stoppedReports == [report])
    }
}

/// Records what a loop's observer is shown.
final class RecordingObserver<Event: Sendable, Effect: Sendable>: LoopObserver {
    let seen = Locked<[LoopActivity<Event, Effect>]>([])

    func observe(_ activity: LoopActivity<Event, Effect>) {
        seen.withLock { $0.append(activity) }
    }

    /// The reports of the loop's end it was shown.
    var stoppedReports: [LoopReport] {
        seen.withLock { seen in seen.compactMap { if case .stopped(let report) = $0 { report } else { nil } } }
    }
}

/// Records what a durable group's observer is shown.
final class RecordingGroupObserver<ID: Hashable & Sendable, Event: Sendable, Effect: Sendable>: LoopGroupObserver {
    let seen = Locked<[(activity: LoopActivity<Event, Effect>, entity: ID?)]>([])

    func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?) {
        seen.withLock { $0.append((activity, entity)) }
    }

    /// The events processed, with their entity.
    var processed: [(event: Event, entity: ID?)] {
        seen.withLock { seen in
            seen.compactMap { activity, entity in
                if case .eventProcessed(let event, _, _, _, _, _) = activity { (event, entity) } else { nil }
            }
        }
    }
}
