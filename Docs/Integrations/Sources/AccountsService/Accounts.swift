internal import EffectHandlers
internal import LoopCore
public import LoopPersistence
public import LoopPostgres
public import LoopRuntime

/// Where the HTTP layer sends accounts' commands: the durable entities the service runs on, or, for a
/// comparison (the benchmark's `http_memory`), the same update on in-memory entities.
public protocol Accounts: Sendable {
    /// Applies `command` to the account `id` and returns its answer: after its event is on disk, for
    /// durable accounts. A retry under the same `requestID` gets the first answer, applied once.
    func apply(
        _ command: Account.Command,
        on id: String,
        requestID: String?
    ) async throws(RequestError)
        -> Account.Outcome
    /// The account's balance, as recorded.
    func balance(of id: String) async throws -> Int
}

/// Accounts as durable entities of a `DurableLoopGroup`, on any event store.
public struct DurableAccounts: Accounts {
    /// The group of accounts.
    public let group: DurableLoopGroup<String, Account.State, Account.Event, Account.Effect>
    /// How long a command may wait for its answer.
    public let timeout: Duration

    /// Accounts on `store`, each kept live while used (`passivation`), each remembering its last
    /// `keysKept` request ids (see ``/LoopPersistence/KeyWindow``).
    public init(
        store: any EventStore,
        passivation: DurableLoopGroup<String, Account.State, Account.Event, Account.Effect>.Passivation =
            .init(idleAfter: .seconds(300), maximumLive: 10_000),
        observer: (any LoopGroupObserver<String, Account.Event, Account.Effect>)? = nil,
        timeout: Duration = .seconds(5),
        keysKept: Int = 1_000
    ) {
        group = DurableLoopGroup(
            stream: { Account.stream(of: $0) },
            program: Account.program,
            effects: EffectRouter(),
            store: store,
            keysKept: keysKept,
            passivation: passivation,
            observer: observer
        )
        self.timeout = timeout
    }

    public func apply(
        _ command: Account.Command,
        on id: String,
        requestID: String?
    ) async throws(RequestError)
        -> Account.Outcome
    {
        try await group.request(to: id, key: requestID, timeout: timeout) { .command(command, replyTo: $0) }
    }

    public func balance(of id: String) async throws -> Int {
        try await group.durableState(of: id).balance
    }
}

/// Accounts as durable entities of a cluster: every process of the service is a ``/LoopPostgres/ClusterNode``
/// of one PostgreSQL database, owning some of the accounts' shards. A command goes through the database's
/// inbox to the node that owns its account, wherever that is, and its answer comes back once its event
/// is recorded; when a node dies, the others take its shards, and a retry under the same request id gets
/// the answer that was recorded.
public struct ClusterAccounts: Accounts {
    /// This process's node.
    public let node: ClusterNode<Account.State, Account.Event, Account.Effect>
    /// How long a command may wait for its answer.
    public let timeout: Duration

    /// Joins nothing yet: connects to the database named by `conninfo` as the node `name` (unique in the
    /// cluster), installing the schema if it is new. Run ``node`` to join (a `RunnableService` does).
    public init(
        connecting conninfo: String,
        name: String,
        configuration: ClusterNode<Account.State, Account.Event, Account.Effect>.Configuration = .init(),
        timeout: Duration = .seconds(5)
    ) async throws {
        node = try await ClusterNode(
            connecting: conninfo,
            name: name,
            program: Account.program,
            effects: EffectRouter(),
            events: BinaryCodec<Account.Event>(),
            states: BinaryCodec<Account.State>(),
            configuration: configuration
        )
        self.timeout = timeout
    }

    public func apply(
        _ command: Account.Command,
        on id: String,
        requestID: String?
    ) async throws(RequestError)
        -> Account.Outcome
    {
        try await node.request(to: Account.stream(of: id), key: requestID, timeout: timeout) {
            .command(command, replyTo: $0)
        }
    }

    /// The balance as recorded in the database, whichever node owns the account.
    public func balance(of id: String) async throws -> Int {
        try await node.recordedState(of: Account.stream(of: id)).balance
    }
}

/// The same accounts in memory only (a `LoopGroup`): nothing survives the process, and request ids
/// are not remembered. For comparison in the benchmark, never for money.
public struct MemoryAccounts: Accounts {
    /// The group of accounts.
    public let group: LoopGroup<String, Account.State, Account.Event, Account.Effect>
    /// How long a command may wait for its answer.
    public let timeout: Duration

    /// In-memory accounts.
    public init(
        observer: (any LoopGroupObserver<String, Account.Event, Account.Effect>)? = nil,
        timeout: Duration = .seconds(5)
    ) {
        group = LoopGroup(
            program: { _ in Program(first: First(state: Account.State()), update: Update(Account.update)) },
            effects: EffectRouter<Account.Effect, Account.Event>().replies(Account.answer),
            observer: observer
        )
        self.timeout = timeout
    }

    public func apply(
        _ command: Account.Command,
        on id: String,
        requestID: String?
    ) async throws(RequestError)
        -> Account.Outcome
    {
        try await group.request(to: id, timeout: timeout) { .command(command, replyTo: $0) }
    }

    public func balance(of id: String) async throws -> Int {
        group.state(of: id)?.balance ?? 0
    }
}
