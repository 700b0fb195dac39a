public import EffectHandlers
public import LoopCore
public import LoopPersistence
public import LoopRuntime

/// Drives durable entities in a test: a ``/LoopPersistence/DurableLoopGroup`` on an in-memory store that
/// outlives ``restart()``, so a test goes through requests, a stop, a recovery and more requests, and
/// asserts replies, states and effects as values.
///
/// ```swift
/// @Test func aWithdrawalIsAnsweredOnceAndSurvivesARestart() async throws {
///     let accounts = DurableHarness<String, Account.State, Account.Event, Account.Effect>(program: Account.program)
///     #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
///     try await accounts.restart()
///     // The same key, after the restart: the recorded answer, not a second deposit.
///     #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
///     #expect(try await accounts.state(of: "a") == Account.State(balance: 5))
///     try await accounts.finish()
/// }
/// ```
///
/// Effects go to the router given (fakes of the program's services, or real ones); those the program
/// starts, replies aside, are recorded with their entity and read with ``effects`` or
/// ``takeEffects()``. ``settle()`` waits until every entity has dealt with what it was sent and every
/// effect has ended. ``finish(fileID:filePath:line:column:)`` stops the group and fails the test for effects never looked at.
public final class DurableHarness<
    ID: Hashable & Sendable,
    State: Equatable & Sendable,
    Event: Sendable,
    Effect: Equatable & Sendable
>: Sendable {
    /// The group, and the task running it.
    public typealias Group = DurableLoopGroup<ID, State, Event, Effect>

    /// The store every incarnation of the group reads and writes.
    public let store: InMemoryEventStore
    private let make: @Sendable (InMemoryEventStore, any LoopGroupObserver<ID, Event, Effect>) -> Group
    private let program: @Sendable (ID) -> DurableProgram<State, Event, Effect>
    /// The group of the moment (the last one, once stopped: it then refuses calls), and the task running
    /// it while it runs.
    private let running = Locked<(group: Group?, task: Task<LoopReport, any Error>?)>((nil, nil))
    private let started = Locked<[(entity: ID, effect: Effect)]>([])
    private let looked = Locked(0)

    /// A harness whose entities run `program(id)`, their effects performed by `router`, their events and
    /// states encoded with the codecs (as the real store would).
    public init(
        program: @escaping @Sendable (ID) -> DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event> = EffectRouter(),
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000
    ) {
        store = InMemoryEventStore()
        self.program = program
        make = { store, observer in
            Group(
                program: program,
                effects: router,
                store: store,
                events: events,
                states: states,
                snapshotEvery: snapshotEvery,
                keysKept: keysKept,
                observer: observer
            )
        }
        start()
    }

    /// The group of the moment: the running one, or, after ``finish(fileID:filePath:line:column:)``, the
    /// last one (stopped: it refuses calls with clear errors).
    public var group: Group {
        running.withLock { $0.group } ?? start()
    }

    /// Sends `event` to `id` (see ``/LoopPersistence/DurableLoopGroup/send(_:to:key:)``).
    @discardableResult
    public func send(_ event: Event, to id: ID, key: String? = nil) -> Delivery {
        group.send(event, to: id, key: key)
    }

    /// Sends `event` to `id` and returns its version once durable.
    public func sendDurably(_ event: Event, to id: ID, key: String? = nil) async throws -> UInt64 {
        try await group.sendDurably(event, to: id, key: key)
    }

    /// Asks `id` and returns the reply its program decides, once recorded.
    public func request<Value: Sendable>(
        to id: ID,
        key: String? = nil,
        timeout: Duration? = nil,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await group.request(to: id, key: key, timeout: timeout, make)
    }

    /// The state of `id` as recorded (recovering it if it is not live).
    public func state(of id: ID) async throws -> State {
        try await group.durableState(of: id)
    }

    /// The effects the programs started so far, replies aside, with their entity, in the order started.
    public var effects: [(entity: ID, effect: Effect)] {
        started.withLock { started in
            looked.withLock { $0 = started.count }
            return started
        }
    }

    /// The effects started since the last call, replies aside, with their entity.
    public func takeEffects() -> [(entity: ID, effect: Effect)] {
        started.withLock { started in
            defer { started = [] }
            looked.withLock { $0 = 0 }
            return started
        }
    }

    /// Returns once every live entity has dealt with what it was sent, and every effect has ended.
    public func settle() async {
        await group.underlying.whenSettled()
    }

    /// Stops the group gracefully and starts a new one on the same store, as a new process would: the
    /// next call to an entity recovers it from what was recorded.
    public func restart() async throws {
        try await stop()
        start()
    }

    /// Stops the group; fails the test if effects were started and never looked at (through
    /// ``effects`` or ``takeEffects()``).
    public func finish(
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async throws {
        try await stop()
        let (count, seen) = (started.withLock { $0.count }, looked.withLock { $0 })
        guard count > seen else { return }
        let unseen = started.withLock { $0.suffix(count - seen).map { "\($0.effect) of \($0.entity)" } }
        SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
            .fail("\(unseen.count) effect(s) started and never looked at: \(unseen.joined(separator: ", "))")
    }

    private func stop() async throws {
        let (group, task) = running.withLock { current in
            defer { current.task = nil }
            return current
        }
        guard let group, let task else { return }
        group.stop()
        _ = try await task.value
    }

    @discardableResult
    private func start() -> Group {
        let (started, program) = (self.started, self.program)
        let observer = ClosureLoopGroupObserver<ID, Event, Effect> { activity, entity in
            // Replies are asserted as the request's value, not as effects.
            if case .effectStarted(let effect, _, _) = activity, let entity,
                program(entity).replies?.find(effect) == nil
            {
                started.withLock { $0.append((entity, effect)) }
            }
        }
        let group = make(store, observer)
        let task = Task { try await group.run() }
        running.withLock { $0 = (group, task) }
        return group
    }
}

extension DurableHarness where Event: Codable, State: Codable {
    /// A harness whose entities run `program(id)`, recorded in ``/LoopPersistence/BinaryCodec``'s form.
    public convenience init(
        program: @escaping @Sendable (ID) -> DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event> = EffectRouter(),
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000
    ) {
        self.init(
            program: program,
            effects: router,
            events: BinaryCodec<Event>(),
            states: BinaryCodec<State>(),
            snapshotEvery: snapshotEvery,
            keysKept: keysKept
        )
    }

    /// A harness whose entities all run `program`, recorded in ``/LoopPersistence/BinaryCodec``'s form.
    public convenience init(
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event> = EffectRouter(),
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000
    ) {
        self.init(program: { _ in program }, effects: router, snapshotEvery: snapshotEvery, keysKept: keysKept)
    }
}
