public import EffectHandlers
public import LoopCore
public import LoopPersistence
public import LoopRuntime

/// One node of a cluster of processes sharing one PostgreSQL database: it owns some of the entities'
/// shards, takes their events from the inbox, and runs their durable loops.
///
/// ```swift
/// let node = try await ClusterNode(
///     connecting: conninfo, name: "node-\(hostname)",
///     program: Order.program, effects: Order.router(services),
///     events: JSONCodec<Order.Event>(), states: JSONCodec<Order.State>()
/// )
/// try await node.run()       // until stop(gracePeriod:), or a failure it cannot ride out (see below)
/// ```
///
/// - **Membership and shards.** Every heartbeat the node renews its lease in the `nodes` table (naming
///   the session that holds its locks) and reads the members: nodes whose lease is younger than the
///   membership timeout and whose lock session is alive. ``ShardMap`` gives the shards it should own. It
///   takes each with a session advisory lock (so one node at a time owns it), and hands over one another
///   node should own once the shard's entities are quiet (their events committed), by releasing the
///   lock. A node whose lease expired (paused, cut off, stuck) has its lock session ended by the others,
///   which frees its shards and fences its appends.
/// - **Processing.** It reads its shards' inbox rows in id order and sends each to its entity's durable
///   loop with the row's id; the store appends the event and deletes the row in one transaction, and
///   `events.inbox_id` is unique: each row makes exactly one committed transition. A row that does not
///   decode, or that the store would refuse (``PostgresEventStore/problem(with:stream:)``), goes to
///   `inbox_dead` with the reason. Effects run after the commit; after a failover an
///   effect can run again (at-least-once), so handlers should be idempotent.
/// - **Fencing.** Every append checks, in its transaction, that the node's lock connection still holds
///   the advisory lock of the stream's shard; a node that lost a shard without knowing (paused, its
///   session cut by the server) has its appends refused (`fenced`) and writes nothing, so the shard's new
///   owner is never the one stopped. A node taking a shard waits for the previous owner's appends under
///   way to end.
/// - **Supervision.** A failure that ends the node's session with the database (its connection breaks,
///   the database restarts, its lease expired while it was paused, an append is fenced because another
///   node took the shard) lets its shards go and stops its entities; the rows they had not committed
///   stay in the inbox for the shards' next owner. The node connects again with backoff and joins as a
///   new session (see ``run(onFailure:)``). It stops on its own only after ``Configuration/outageLimit``
///   without the database, or when another process joined under its name; an entity stopped by data it
///   cannot read is reported, tried again with backoff, and the rest go on.
public final class ClusterNode<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// How a node paces itself.
    public struct Configuration: Sendable {
        /// The schema of the store and the inbox.
        public var schema: String
        /// How often the node records its heartbeat, looks at the membership, and polls the inbox when
        /// no notification wakes it.
        public var heartbeat: Duration
        /// The lease: how long after its last heartbeat a node no longer counts and loses its shards
        /// (the others end its lock session). A node that died counts no more at once: its shards are
        /// taken at the others' next heartbeat.
        public var membershipTimeout: Duration
        /// The most inbox rows one poll takes.
        public var batch: Int
        /// Save an entity's snapshot after this many of its events (`nil`: never).
        public var snapshotEvery: UInt64?
        /// How long a node that lost the database keeps trying to reach it again before ``run(onFailure:)`` gives
        /// up and throws: a restart of the database, or a network failure shorter than this, is ridden
        /// out.
        public var outageLimit: Duration
        /// How long an entity whose state resumes nothing (settled: no work under way) stays in memory
        /// after its last event: then it is passivated, and its mark of remembered work cleared, so a node
        /// taking its shard does not recover it.
        public var passivateSettledAfter: Duration
        /// How long the answer to a request across the cluster stays where its caller reads it (the
        /// `replies` table), counted from the request. A repeat of its key after that is answered by the
        /// entity from its key window, if the key is still in it.
        public var answersKept: Duration

        /// The defaults: schema `effectloop`, heartbeat 250 ms, timeout 3 s, 2,000 rows, snapshot every
        /// 1,000 events, an outage limit of 60 s, settled entities passivated after 30 s, answers kept an hour.
        public init(
            schema: String = "effectloop",
            heartbeat: Duration = .milliseconds(250),
            membershipTimeout: Duration = .seconds(3),
            batch: Int = 2_000,
            snapshotEvery: UInt64? = 1_000,
            outageLimit: Duration = .seconds(60),
            passivateSettledAfter: Duration = .seconds(30),
            answersKept: Duration = .seconds(3_600)
        ) {
            self.schema = schema
            self.heartbeat = heartbeat
            self.membershipTimeout = membershipTimeout
            self.batch = batch
            self.snapshotEvery = snapshotEvery
            self.outageLimit = outageLimit
            self.passivateSettledAfter = passivateSettledAfter
            self.answersKept = answersKept
        }
    }

    /// The node's name in the `nodes` table; unique in the cluster.
    public let name: String
    private let configuration: Configuration
    private let conninfo: String
    private let program: DurableProgram<State, Inboxed<Event>, Effect>
    /// Makes each session's entities, specialized for the program (see `EntityGroup`).
    private let entities: EntityGroupMaker<State, Event, Effect>
    private let events: any EventCodec<Event>
    private let states: any EventCodec<State>
    /// The node's session with the database now, and what the ones before it counted.
    private let supervision: Locked<Supervision>
    /// How the node asks entities (its own or other nodes'): through the database, as any process does.
    private let client: ClusterClient<Event>

    private struct Supervision {
        var current: ClusterSession<State, Event, Effect>
        /// Whether `current` has ended (its counts are in the totals below; it owns nothing).
        var ended = false
        var stopping = false
        /// The grace period of the graceful stop asked for, if one was: the shortest asked.
        var grace: Duration?
        /// What the entities of the sessions that ended did, added up.
        var report = LoopReport()
        var interruptions = 0
        var dispatched = 0
        var dead = 0
        var recoveries = 0
    }

    /// Connects, installs or upgrades the schema, and prepares the node's durable loops; ``run(onFailure:)`` joins
    /// the cluster.
    ///
    /// - Parameters:
    ///   - conninfo: the database (`host=... dbname=...`).
    ///   - name: the node's name, unique in the cluster (a restarted node may reuse its name).
    ///   - program: every entity's program; an entity's id is its stream's name.
    ///   - router: how the program's effects are performed.
    ///   - events: how events are encoded in the inbox and the events table.
    ///   - states: how snapshots are encoded.
    ///   - configuration: pacing and schema.
    /// - Throws: when the database cannot be reached or its schema installed.
    @inlinable
    public convenience init(
        connecting conninfo: String,
        name: String,
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        configuration: Configuration = Configuration()
    ) async throws {
        // The entities' program and routes take events with their inbox rows. Made here, and the
        // sessions' groups too, so they are specialized for the program's types (see `EntityGroup`).
        let update = program.update
        let inboxed = DurableProgram<State, Inboxed<Event>, Effect>(
            initial: program.initial,
            update: Update { state, inboxed in update(&state, inboxed.event) },
            resume: program.resume,
            replies: program.replies,
            timers: program.timers
        )
        let routes = router.mapEvents { Inboxed(inboxRow: nil, event: $0) }
        try await self.init(
            connecting: conninfo,
            name: name,
            inboxed: inboxed,
            events: events,
            states: states,
            configuration: configuration,
            entities: EntityGroupMaker(program: inboxed, router: routes, events: events, states: states)
        )
    }

    /// The node, its program taking inboxed events, its sessions' groups (and their routes) made by
    /// `entities`.
    @usableFromInline
    init(
        connecting conninfo: String,
        name: String,
        inboxed program: DurableProgram<State, Inboxed<Event>, Effect>,
        events: any EventCodec<Event>,
        states: any EventCodec<State>,
        configuration: Configuration,
        entities: EntityGroupMaker<State, Event, Effect>
    ) async throws {
        self.name = name
        self.configuration = configuration
        self.conninfo = conninfo
        self.events = events
        self.states = states
        self.program = program
        self.entities = entities
        let client = try await ClusterClient(
            connecting: conninfo,
            events: events,
            schema: configuration.schema,
            installing: false
        )
        self.client = client
        do {
            let first = try await ClusterSession(
                conninfo: conninfo,
                name: name,
                configuration: configuration,
                program: self.program,
                entities: entities,
                events: events,
                states: states,
                after: nil
            )
            supervision = Locked(Supervision(current: first))
        } catch {
            await client.close()
            throw error
        }
    }

    /// Asks the entity `entity`, wherever in the cluster it runs (on this node or another), as a
    /// ``ClusterClient`` does: the event `make` builds around a reply address goes through the inbox, and
    /// the answer comes back once the event that decided it is recorded. The answer is decoded as the
    /// program records it (``/LoopPersistence/DurableProgram/replying(_:)``). Keys, errors and timeouts
    /// as ``ClusterClient/request(to:key:timeout:answers:_:)``. Once ``run(onFailure:)`` has returned, the
    /// node's requests are refused (``/LoopRuntime/RequestError/rejected(_:)``).
    ///
    /// ```swift
    /// let outcome: Outcome = try await node.request(to: "account-17", key: requestID) { .withdraw(50, replyTo: $0) }
    /// ```
    public func request<Value: Sendable>(
        to entity: String,
        key: String? = nil,
        timeout: Duration = .seconds(30),
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        guard let replies = program.replies else { throw .invalid("\(CallRefusal.noReplies)") }
        return try await client.ask(to: entity, key: key, timeout: timeout, make: make) { bytes in
            switch replies.decode(bytes) {
            case .success(let value as Value): .success(value)
            case .success(let value):
                // The request was applied: its answer is of another type than asked.
                .failure(
                    .storeFailed(
                        "the program replies with \(type(of: value)), not the \(Value.self) this request expects"
                    )
                )
            case .failure(let error): .failure(.storeFailed("the answer does not decode: \(error)"))
            }
        }
    }

    /// The shards the node owns now.
    public var ownedShards: Set<Int> {
        let (current, ended) = supervision.withLock { ($0.current, $0.ended) }
        return ended ? [] : current.ownedShards
    }

    /// How many inbox rows the node has handed to its entities, and how many it moved to `inbox_dead`.
    public var counts: (dispatched: Int, dead: Int) {
        let (current, ended, dispatched, dead) = supervision.withLock {
            ($0.current, $0.ended, $0.dispatched, $0.dead)
        }
        let now = ended ? (dispatched: 0, dead: 0) : current.counts
        return (dispatched + now.dispatched, dead + now.dead)
    }

    /// How many times the node recovered an entity (read its stream back): once when it takes a shard
    /// for each of its entities that may have work under way, and once for each entity it is sent an
    /// event after releasing it.
    public var recoveries: Int {
        let (current, ended, recoveries) = supervision.withLock { ($0.current, $0.ended, $0.recoveries) }
        return recoveries + (ended ? 0 : current.recoveries)
    }

    /// How many times the node lost its session with the database (the connection broke, the database
    /// restarted, its lease expired, an append was fenced) and joined again.
    public var interruptions: Int {
        supervision.withLock { $0.interruptions }
    }

    /// The state of a live entity of this node, or `nil`.
    public func state(of entity: String) -> State? {
        supervision.withLock { $0.current }.state(of: entity)
    }

    /// The state of the entity `entity` as recorded in the database, wherever in the cluster it runs:
    /// its latest snapshot and the events after it, folded through the program, read only
    /// (``/LoopPersistence/DurableProgram/recordedState(of:in:events:states:)``). An answer to a request
    /// is given only once its event is recorded, so a read after an answer sees that answer's event.
    /// Rows still in the inbox are not in it. An entity with no events has the program's initial state.
    ///
    /// ```swift
    /// let balance = try await node.recordedState(of: "account-17").balance
    /// ```
    ///
    /// - Throws: ``/LoopPersistence/DurableLoopError/storeFailed(_:)`` when the database cannot be read
    ///   (the node is between sessions, or has stopped) or a record does not decode.
    public func recordedState(of entity: String) async throws(DurableLoopError) -> State {
        try await supervision.withLock { $0.current }.recordedState(of: entity)
    }

    /// Joins the cluster and processes its shards' inboxes until ``stop(gracePeriod:)``; then leaves
    /// gracefully: stops taking rows, lets the events in flight commit, releases its shards. When the
    /// task running it is cancelled, it leaves at once: its entities are cancelled (the rows they had not
    /// committed stay in the inbox) and it returns without waiting for its next heartbeat. Returns what the
    /// node's entities did, added up over its sessions; the report's ending is the last session's.
    ///
    /// When the node loses its session with the database (the connection breaks, the database restarts,
    /// the node's lease expired while it was paused, an append is fenced because another node took the
    /// shard), it lets its shards go (its entities stop; the rows they had not committed stay in the
    /// inbox), connects again, waiting the heartbeat and then twice as long each time up to the
    /// membership timeout, and joins again. It gives up only after ``Configuration/outageLimit`` without
    /// reaching the database, or when another process has joined under its name.
    ///
    /// - Parameter onFailure: called with each failure the node rides out: a lost session (before it joins
    ///   again), or an entity stopped by data it cannot read (``ClusterError/entityFailed(stream:reason:)``;
    ///   that entity is tried again with backoff, the others go on).
    /// - Throws: ``ClusterError`` when the node gave up.
    @discardableResult
    public func run(onFailure: @escaping @Sendable (ClusterError) -> Void) async throws -> LoopReport {
        // The node's own requests end with it: its client's connections are closed when it stops.
        do {
            let total = try await running(onFailure: onFailure)
            await client.close()
            return total
        } catch {
            await client.close()
            throw error
        }
    }

    private func running(onFailure failed: @escaping @Sendable (ClusterError) -> Void) async throws -> LoopReport {
        try await withTaskCancellationHandler {
            try await supervise(onFailure: failed)
        } onCancel: {
            let current = supervision.withLock { supervision in
                supervision.stopping = true
                return supervision.current
            }
            current.cancel()
        }
    }

    /// Joins the cluster and processes its shards' inboxes until stopped or cancelled, reporting nothing
    /// of the failures it rides out; see ``run(onFailure:)``. Returns what the node's entities did, added up
    /// over its sessions with the database; its ``/LoopRuntime/LoopReport/ending`` is the last session's.
    @discardableResult
    public func run() async throws -> LoopReport {
        try await run(onFailure: { _ in })
    }

    private func supervise(onFailure failed: @escaping @Sendable (ClusterError) -> Void) async throws -> LoopReport {
        var session = supervision.withLock { $0.current }
        // The wait before joining again: the heartbeat, doubled (up to the membership timeout) for each
        // session that failed within the timeout of its start, so a failure that repeats (an append the
        // database refuses each time) does not make the node join and leave in a tight loop.
        var backoff = configuration.heartbeat
        while true {
            let started = ContinuousClock.now
            let (failure, entities) = await session.run(onFailure: failed)
            let (counted, recovered) = (session.counts, session.recoveries)
            let (stopping, total) = supervision.withLock { supervision in
                supervision.ended = true
                supervision.report = supervision.report.adding(entities)
                supervision.report.ending = entities.ending
                supervision.dispatched += counted.dispatched
                supervision.dead += counted.dead
                supervision.recoveries += recovered
                if failure != nil && !supervision.stopping { supervision.interruptions += 1 }
                return (supervision.stopping, supervision.report)
            }
            guard let failure, !stopping else { return total }
            failed(failure)
            let short = ContinuousClock.now - started < configuration.membershipTimeout
            backoff = short ? min(backoff * 2, configuration.membershipTimeout) : configuration.heartbeat
            guard let next = try await rejoin(after: failure, previous: session.holder, waiting: backoff) else {
                return supervision.withLock { $0.report }
            }
            session = next
        }
    }

    /// Connects again after `failure`, first after `delay`, then twice as long each time up to the
    /// membership timeout; the new session, or `nil` if asked to stop meanwhile.
    private func rejoin(
        after failure: ClusterError,
        previous: Int32,
        waiting delay: Duration
    ) async throws -> ClusterSession<State, Event, Effect>? {
        let since = ContinuousClock.now
        var delay = delay
        var last = failure
        while true {
            // Waits in steps of at most 50 ms, so a stop is heard at once.
            let until = ContinuousClock.now + delay
            while ContinuousClock.now < until {
                if supervision.withLock({ $0.stopping }) || Task.isCancelled { return nil }
                try? await Task.sleep(for: min(.milliseconds(50), until - ContinuousClock.now))
            }
            do {
                let session = try await ClusterSession(
                    conninfo: conninfo,
                    name: name,
                    configuration: configuration,
                    program: program,
                    entities: entities,
                    events: events,
                    states: states,
                    after: previous
                )
                let (stopped, grace) = supervision.withLock { supervision in
                    supervision.current = session
                    supervision.ended = false
                    return (supervision.stopping, supervision.grace ?? .zero)
                }
                if stopped { session.stop(gracePeriod: Task.isCancelled ? .zero : grace) }
                return session
            } catch let error as ClusterError {
                // Another process runs under this node's name: it is the node now.
                throw error
            } catch {
                last = .connectionLost("\(error)")
            }
            if ContinuousClock.now - since >= configuration.outageLimit { throw last }
            delay = min(delay * 2, configuration.membershipTimeout)
        }
    }

    /// Asks the node to leave the cluster gracefully; ``run(onFailure:)`` returns once it has.
    ///
    /// The node stops taking inbox rows after the read under way, lets its entities finish the events in
    /// flight and their effects until `gracePeriod` is over (the rows they did not commit stay in the
    /// inbox for the node that takes the shard), and releases its shards. Called again, it can only bring
    /// the deadline forward. A cancellation of the task running ``run(onFailure:)`` stops it the same way,
    /// at once, without a grace period.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        let (current, grace) = supervision.withLock { supervision in
            supervision.stopping = true
            let grace = min(supervision.grace ?? gracePeriod, gracePeriod)
            supervision.grace = grace
            return (supervision.current, grace)
        }
        current.stop(gracePeriod: grace)
    }
}

/// One session of a cluster node with the database: the connection holding its shard locks (the
/// session), its store connection, its lease keeper and its entities. A failure ends the session; the
/// node starts a new one (see ``ClusterNode/run(onFailure:)``).
final class ClusterSession<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    let name: String
    private let configuration: ClusterNode<State, Event, Effect>.Configuration
    private let store: PostgresEventStore
    private let control: PostgresWorker
    /// The backend pid of `control`'s session, which holds the shard locks.
    let holder: Int32
    /// The base of the keys of the locks `control`'s session holds beside each shard's lock (`token +
    /// shard`), which the store's appends check (their fence): random for each session, its low 16 bits
    /// clear, so a key's low bits are its shard (see `ShardKeys`).
    private let token = Int64.random(in: 0..<(1 << 46)) << 16
    private let lease: LeaseKeeper
    /// The entities, and the group's calls for each inbox row, specialized for the program.
    private let entities: EntityGroup<State, Event, Effect>
    /// The entities' durable loop group.
    private var group: DurableLoopGroup<String, State, Inboxed<Event>, Effect> { entities.group }
    /// The program, kept to read entities' recorded states (``recordedState(of:)``).
    private let program: DurableProgram<State, Inboxed<Event>, Effect>
    private let events: any EventCodec<Event>
    private let states: any EventCodec<State>
    /// The program's `resume`: an entity whose state resumes nothing is settled.
    private let resume: @Sendable (State) -> [Effect]
    private let shards: Int
    private let ledger: Locked<Ledger>
    /// Wakes the loop from its wait for the inbox's notifications when the session is asked to stop, so
    /// a stop is heard at once, not at the next heartbeat.
    private let wakeup = Wakeup()
    /// What the node holds and does, changed only by its own loop (and `stop`).
    private struct Ledger {
        /// The shards held and handed over, and the other nodes seen expired: changed only by
        /// ``Ownership/update``, in ``tick()``.
        var ownership: Ownership
        var shardOf: [String: Int] = [:]
        /// Rows sent to their entities and not known to be gone from the inbox: a read of the inbox leaves
        /// them out, and they are not sent again. Forgotten when their event commits (which deletes the
        /// row), or when a heartbeat's whole read no longer sees them (rows that no append consumed).
        var inFlight: Set<Int64> = []
        /// Whether a read of the inbox (a heartbeat's or a notification's) is under way, until its rows are
        /// dispatched.
        var reading = false
        /// Rows whose event committed while a read was under way: that read may still return them (its
        /// snapshot may predate the commit), so its dispatch skips them; forgotten after it.
        var committedDuringRead: Set<Int64> = []
        /// Request rows whose caller has its answer: one still in the inbox is a repeat of its key, which
        /// no append consumed, and is deleted when seen.
        var answered: Set<Int64> = []
        /// Heartbeats since the last sweep of old `replies` rows.
        var sinceSweep = 0
        var stopping = false
        /// The grace period its entities get when it stops (the shortest asked for), if a stop was asked.
        var grace: Duration?
        var cancelled = false
        /// Whether its entities were asked to stop: a later, shorter stop goes to them at once.
        var entitiesStopping = false
        /// The task running the session's entities, once it runs.
        var running: Task<LoopReport, any Error>?
        var dispatched = 0
        var dead = 0
        /// The entities stopped by data they cannot read: retried with backoff.
        var failed: [String: Retry] = [:]
        /// The streams of owned shards marked in `awake` (as far as this session knows), with their
        /// shard: forgotten with the shard when it is handed over (another node may clear them then).
        var awake: [String: Int] = [:]
        /// When each marked entity was last sent an event or woken.
        var lastActive: [String: ContinuousClock.Instant] = [:]
    }

    /// Connects and prepares the session's durable loops. `previous`: the lock session of the node's
    /// session before this one, when it joins again.
    ///
    /// - Throws: ``ClusterError/superseded(_:)`` when joining again and another process holds the node's
    ///   name; otherwise the store's or the connection's error.
    init(
        conninfo: String,
        name: String,
        configuration: ClusterNode<State, Event, Effect>.Configuration,
        program: DurableProgram<State, Inboxed<Event>, Effect>,
        entities: EntityGroupMaker<State, Event, Effect>,
        events: any EventCodec<Event>,
        states: any EventCodec<State>,
        after previous: Int32?
    ) async throws {
        self.name = name
        self.configuration = configuration
        self.program = program
        self.events = events
        self.states = states
        self.resume = program.resume
        let schema = configuration.schema
        store = try await PostgresEventStore(
            connecting: conninfo,
            schema: schema,
            // The row id is in the event's bytes, after what a durable loop keeps beside them.
            inboxRowOf: { payload in (try? storedEvent(payload))?.flatMap { InboxedCodec<Event>.inboxRow(of: $0) } },
            // Answers to requests from the inbox, written where their callers read them.
            answersOf: { payload in (try? storedAnswers(payload)) ?? [] },
            applicationName: Self.writerName(name)
        )
        control = PostgresWorker(
            conninfo,
            label: "effectloop.cluster.\(name)",
            applicationName: "effectloop node \(name)"
        )
        let found: (shards: Int, holder: Int32, successor: Bool)
        do {
            found = try await control.run { connection throws(PostgresError) in
                let rows = try connection.execute(
                    "SELECT value FROM \(schema).effectloop_meta WHERE key = 'shards'"
                )
                let backend = try connection.execute("SELECT pg_backend_pid()::bigint")
                // Joining again: a live session recorded under this name, not this one's or the last
                // one's, is another process that took the name (a restart while this one was paused).
                var successor = false
                if let previous {
                    let others = try connection.execute(
                        """
                        SELECT count(*) FROM \(schema).nodes n
                        JOIN pg_stat_activity a ON a.pid = n.session_pid AND a.backend_start = n.session_start
                        WHERE n.node = $1 AND a.pid <> pg_backend_pid() AND a.pid <> $2::integer
                        """,
                        [.text(name), .int(Int64(previous))]
                    )
                    successor = try others.int(0, 0) > 0
                }
                return (
                    rows.rows.isEmpty ? 64 : Int(try rows.int(0, 0)), Int32(clamping: try backend.int(0, 0)),
                    successor
                )
            }
        } catch {
            await control.close()
            await store.close()
            throw PostgresEventStore.storeError(error, doing: "read the shard count")
        }
        if found.successor {
            await control.close()
            await store.close()
            throw ClusterError.superseded("another process joined the cluster as '\(name)'")
        }
        (shards, holder) = (found.shards, found.holder)
        let ledger = Locked(
            Ledger(ownership: Ownership(node: name, shards: found.shards, grace: configuration.heartbeat * 2))
        )
        self.ledger = ledger
        // A row whose event committed is gone from the inbox: no longer left out of reads. Left out until
        // the next whole read, every request of a heartbeat's time was compared with every row each read
        // visits (`Docs/Performance.md`).
        store.onConsumed { rows in
            ledger.withLock { ledger in
                for row in rows {
                    ledger.inFlight.remove(row)
                    if ledger.reading { ledger.committedDuringRead.insert(row) }
                }
            }
        }
        // Every append checks, in its transaction, that this session still holds its stream's shard.
        store.fence(token: token, shards: shards)
        lease = LeaseKeeper(
            conninfo: conninfo,
            schema: schema,
            node: name,
            heartbeat: configuration.heartbeat,
            stallLimit: configuration.membershipTimeout * 4
        )
        self.entities = entities.make(store, configuration.snapshotEvery)
    }

    /// The shards the session owns now.
    var ownedShards: Set<Int> {
        ledger.withLock { $0.ownership.owned }
    }

    /// How many inbox rows the session handed to its entities, and how many it moved to `inbox_dead`.
    var counts: (dispatched: Int, dead: Int) {
        ledger.withLock { ($0.dispatched, $0.dead) }
    }

    /// How many times the session recovered an entity (read its stream back).
    var recoveries: Int {
        group.recoveries
    }

    /// The state of a live entity of this session, or `nil`.
    func state(of entity: String) -> State? {
        group.state(of: entity)
    }

    /// The state the entity's recorded history makes, read through the session's store.
    func recordedState(of entity: String) async throws(DurableLoopError) -> State {
        try await program.recordedState(of: entity, in: store, events: InboxedCodec(events), states: states)
    }

    /// Joins the cluster and processes its shards' inboxes until ``stop(gracePeriod:)`` (then leaves gracefully:
    /// stops taking rows, lets the events in flight commit, releases its shards) or until a failure ends
    /// the session, which it returns. Entities stopped by data they cannot read are passed to `failed`
    /// and the session goes on.
    func run(onFailure failed: @Sendable (ClusterError) -> Void) async -> (ClusterError?, LoopReport) {
        let running = Task { [entities] in try await entities.run() }
        if ledger.withLock({ ledger in
            ledger.running = running
            return ledger.cancelled
        }) {
            running.cancel()
        }
        _ = await group.waitUntilRunning()
        var failure: ClusterError?
        do {
            let channel = PostgresSchema.inboxChannel(configuration.schema)
            _ = try await control.run { connection throws(PostgresError) in try connection.execute("LISTEN \(channel)")
            }
            // A cancelled task stops the node: it leaves, and its entities are cancelled below.
            // A heartbeat (membership, shards, the inbox) every `heartbeat`; in between, a notification
            // of new rows wakes the node to read the inbox alone.
            var beat = ContinuousClock.now
            var first = true
            // Rows read right after a notification woke the wait, in the same turn of the connection's
            // queue: a wait and then a read in two turns cost two more thread switches on the way of
            // every request (each a wait for a processor, on a busy machine).
            var notified: [InboxRow]?
            while !ledger.withLock({ $0.stopping }) && !Task.isCancelled {
                lease.turned()
                let rows: [InboxRow]
                let whole = notified == nil && (first || ContinuousClock.now - beat >= configuration.heartbeat)
                if let read = notified {
                    rows = read
                } else if whole {
                    beat = .now
                    first = false
                    rows = try await tick()
                    lease.start(session: holder)
                } else {
                    rows = try await read()
                }
                notified = nil
                dispatch(rows, whole: whole)
                if let ended = failures(passingTo: failed) {
                    failure = ended
                    break
                }
                // Woken early by a notification; rows that came meanwhile are read at the next tick.
                if rows.count < configuration.batch {
                    notified = try await waitThenRead(until: beat + configuration.heartbeat)
                }
            }
        } catch let error as PostgresError {
            failure = .connectionLost(error.description)
        } catch {
            failure = .connectionLost("\(error)")
        }
        await lease.stop()
        await leave()
        // A node that may have lost its locks commits as little as it can from now on: the database
        // refuses what another node did meanwhile, but nothing needs to be tried.
        let (grace, cancelled) = ledger.withLock { ledger in
            ledger.entitiesStopping = true
            return (ledger.grace ?? .seconds(30), ledger.cancelled)
        }
        if cancelled || Task.isCancelled {
            running.cancel()
        } else {
            group.stop(gracePeriod: failure == nil ? grace : .zero)
        }
        let entities = (try? await running.value) ?? group.report
        await control.close()
        await store.close()
        return (failure, entities)
    }

    /// An entity stopped by data it cannot read: how often, and when it is tried again.
    private struct Retry {
        var attempts = 0
        var at = ContinuousClock.now
        /// Failed now (its rows are not read); otherwise being tried again.
        var failing = false
    }

    /// Looks at the entities that failed: returns the failure that ends the session, if one does, and
    /// reports each other failure as it happens. Those entities are tried again after the membership
    /// timeout, twice as long after each further failure, up to 64 times it: the group forgets the
    /// failure, and their rows are read again (their next event recovers them anew).
    ///
    /// Told apart by type: a fenced append, or a stream another writer moved on, means the node lost
    /// the shard; the store unavailable means the database or the connection failed: both end the
    /// session, and the node joins again. Data the entity cannot read (undecodable, damaged, an event
    /// that does not encode) would stop it wherever it ran: it stops that entity only.
    private func failures(passingTo tell: @Sendable (ClusterError) -> Void) -> ClusterError? {
        let failed = group.failedStreams
        retryDue()
        guard !failed.isEmpty else { return nil }
        var fresh: [(String, DurableFailure)] = []
        for (stream, failure) in failed.sorted(by: { $0.key < $1.key }) {
            if failure.isFenced { return .fenced(stream: stream, reason: failure.description) }
            switch failure.kind {
            case .store, .storeError:
                if failure.isCorruption {
                    fresh.append((stream, failure))
                } else {
                    return .storeFailed(stream: stream, reason: failure.description)
                }
            case .undecodable, .unencodable, .noProgram, .unknownRevision:
                fresh.append((stream, failure))
            }
        }
        let base = configuration.membershipTimeout
        let untold = ledger.withLock { ledger in
            var untold: [(String, DurableFailure)] = []
            for (stream, failure) in fresh where ledger.failed[stream]?.failing != true {
                var retry = ledger.failed[stream] ?? Retry()
                retry.attempts += 1
                retry.failing = true
                retry.at = .now + base * (1 << min(retry.attempts - 1, 6))
                ledger.failed[stream] = retry
                untold.append((stream, failure))
            }
            return untold
        }
        for (stream, failure) in untold { tell(.entityFailed(stream: stream, reason: failure.description)) }
        return nil
    }

    /// Lets the failed entities whose retry is due start again.
    private func retryDue() {
        let now = ContinuousClock.now
        let due = ledger.withLock { ledger -> [String] in
            let due = ledger.failed.filter { $0.value.failing && $0.value.at <= now }.map(\.key)
            for stream in due { ledger.failed[stream]?.failing = false }
            return due
        }
        for stream in due { group.forgetFailure(of: stream) }
    }

    /// Asks the session to leave the cluster, giving its entities until `gracePeriod` to finish;
    /// ``run(onFailure:)`` returns once it has.
    func stop(gracePeriod: Duration) {
        let (grace, forward) = ledger.withLock { ledger in
            ledger.stopping = true
            let grace = min(ledger.grace ?? gracePeriod, gracePeriod)
            ledger.grace = grace
            return (grace, ledger.entitiesStopping)
        }
        wakeup?.signal()
        // Already stopping its entities: the shorter grace period reaches them now.
        if forward { group.stop(gracePeriod: grace) }
    }

    /// Asks the session to leave the cluster at once: its entities are cancelled, not drained.
    func cancel() {
        let running = ledger.withLock { ledger in
            ledger.stopping = true
            ledger.cancelled = true
            return ledger.running
        }
        wakeup?.signal()
        running?.cancel()
    }

    // MARK: The loop

    /// One heartbeat: records the node, reads the membership, takes and releases shards, and reads the
    /// inbox rows of the shards it owns.
    private func tick() async throws -> [InboxRow] {
        let (schema, name, batch) = (configuration.schema, self.name, configuration.batch)
        let timeout = configuration.membershipTimeout.wholeMilliseconds
        let quietReleasing = releasable()
        let settled = passivateSettled()
        // Every 10 s, the answers kept past their time are swept, up to 50,000 (by every node: a sweep is cheap).
        let sweepEvery = max(1, Int(Duration.seconds(10) / max(configuration.heartbeat, .milliseconds(1))))
        let sweep = ledger.withLock { ledger -> Bool in
            ledger.reading = true
            ledger.sinceSweep += 1
            guard ledger.sinceSweep >= sweepEvery else { return false }
            ledger.sinceSweep = 0
            return true
        }
        let kept = configuration.answersKept.wholeMilliseconds
        var begun = ledger.withLock { $0.ownership }
        let (marks, failed) = ledger.withLock { ledger in
            (Set(ledger.awake.keys), Set(ledger.failed.filter(\.value.failing).keys))
        }
        // A settled entity's mark is cleared below: a row read for it in the same heartbeat marks it again.
        let known = marks.subtracting(settled.map(\.0))
        let holder = self.holder
        // The decisions are the ownership program's (`Ownership.update`); this heartbeat carries them out.
        var doomed: [String] = []
        var unlock: Set<Int> = []
        for effect in Ownership.update(&begun, .heartbeat(at: .now, quiet: quietReleasing)) {
            switch effect {
            case .endSessions(let nodes): doomed += nodes
            case .unlock(let shards): unlock.formUnion(shards)
            case .tryLock, .recover: break
            }
        }
        let outcome = try await control.run {
            [begun, doomed, unlock, failed, token] connection throws(PostgresError) -> Tick in
            var view = begun
            // The connection must still be the session that holds the node's locks: one that was ended
            // (its lease expired) and connected again holds none, and must not count as this node.
            let session = try connection.execute("SELECT pg_backend_pid()::bigint")
            guard try session.int(0, 0) == Int64(holder) else {
                throw PostgresError(.connection, message: "the node's lock session ended (its lease expired?)")
            }
            // A predecessor of this node (the same name, another session: a restart while the old process
            // lingers, paused or cut off) holds locks this node needs: its session is ended. Sessions of
            // another role cannot be ended, and are left alone (every node must use the same role).
            try connection.execute(
                """
                SELECT pg_terminate_backend(a.pid) FROM \(schema).nodes n
                JOIN pg_stat_activity a ON a.pid = n.session_pid AND a.backend_start = n.session_start
                WHERE n.node = $1 AND a.pid <> pg_backend_pid() AND a.usename = current_user
                """,
                [.text(name)]
            )
            // A node whose lease expired (no heartbeat within the timeout: paused, partitioned, hung)
            // loses its shards whatever its session still holds: its lock session is ended, which frees
            // its locks for the shards' new owners and fences its appends (they check that session).
            // Only once this node has seen it expired for a grace of two heartbeats (`doomed`), and if it
            // still is: after a stall every node shares (the database's, the network's), every lease
            // looks expired for a moment, until the renewals that waited out the stall land.
            for node in doomed {
                try connection.execute(
                    """
                    SELECT pg_terminate_backend(a.pid) FROM \(schema).nodes n
                    JOIN pg_stat_activity a ON a.pid = n.session_pid AND a.backend_start = n.session_start
                    WHERE n.node = $1 AND n.node <> $2 AND a.usename = current_user
                      AND n.heartbeat_at <= now() - make_interval(secs => $3::bigint / 1000.0)
                    """,
                    [.text(node), .text(name), .int(timeout)]
                )
            }
            // The heartbeat renews the node's lease and names the session that holds its locks.
            try connection.execute(
                """
                INSERT INTO \(schema).nodes (node, heartbeat_at, session_pid, session_start)
                SELECT $1, now(), pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()
                ON CONFLICT (node) DO UPDATE SET
                    heartbeat_at = now(), session_pid = excluded.session_pid, session_start = excluded.session_start
                """,
                [.text(name)]
            )
            // The nodes whose lease expired while their session lives on: ended once seen so long enough.
            let expired = try connection.execute(
                """
                SELECT n.node FROM \(schema).nodes n
                JOIN pg_stat_activity a ON a.pid = n.session_pid AND a.backend_start = n.session_start
                WHERE n.node <> $1 AND a.usename = current_user
                  AND n.heartbeat_at <= now() - make_interval(secs => $2::bigint / 1000.0)
                """,
                [.text(name), .int(timeout)]
            )
            var stale: [String] = []
            for index in expired.rows.indices { stale.append(try expired.text(index, 0)) }
            // The members: a lease not expired, held by a session still alive. A node that died (its
            // session ended with it) counts no more at once, so its shards are taken at the next
            // heartbeat rather than after the timeout.
            let live = try connection.execute(
                """
                SELECT n.node FROM \(schema).nodes n
                WHERE n.heartbeat_at > now() - make_interval(secs => $1::bigint / 1000.0)
                  AND EXISTS (
                      SELECT 1 FROM pg_stat_activity a WHERE a.pid = n.session_pid AND a.backend_start = n.session_start
                  )
                """,
                [.int(timeout)]
            )
            var members: [String] = []
            for index in live.rows.indices { members.append(try live.text(index, 0)) }
            var wanted: [Int] = []
            for effect in Ownership.update(&view, .membership(members: members, expired: stale, at: .now)) {
                if case .tryLock(let shards) = effect { wanted += shards }
            }
            var taken: Set<Int> = []
            for shard in wanted {
                let locked = try connection.execute(
                    "SELECT pg_try_advisory_lock(hashtext($1), $2::integer)::integer::bigint",
                    [.text(schema), .int(Int64(shard))]
                )
                var held = false
                if try locked.int(0, 0) == 1 {
                    do throws(PostgresError) {
                        try ShardKeys.awaitOthersGone(of: shard, on: connection)
                        try Self.awaitFence(of: shard, schema: schema, node: name, on: connection)
                        // The key the store's appends check: taken after the shard's lock, let go
                        // before it. It waits only for an append of this node that found it free and
                        // was fenced, until that transaction ends (at most 10 s: one stuck on its way
                        // to the server must not hold the heartbeat).
                        try Self.lock(
                            "SELECT pg_advisory_lock($1::bigint + $2::integer)",
                            [.int(token), .int(Int64(shard))],
                            within: "10s",
                            on: connection
                        )
                        held = true
                    } catch {
                        if error.kind == .connection { throw error }
                        // The old owner's append could not be waited for or ended (another role, say):
                        // the shard is left for a later heartbeat rather than taken unsafely.
                        try connection.execute(
                            "SELECT pg_advisory_unlock(hashtext($1), $2::integer)",
                            [.text(schema), .int(Int64(shard))]
                        )
                    }
                }
                for effect in Ownership.update(&view, held ? .locked(shard: shard) : .refused(shard: shard)) {
                    if case .recover(let shard) = effect { taken.insert(shard) }
                }
            }
            for shard in unlock.sorted() {
                // The appends' key first: from here on they are fenced, before the shard can be taken.
                try connection.execute(
                    "SELECT pg_advisory_unlock($1::bigint + $2::integer)",
                    [.int(token), .int(Int64(shard))]
                )
                try connection.execute(
                    "SELECT pg_advisory_unlock(hashtext($1), $2::integer)",
                    [.text(schema), .int(Int64(shard))]
                )
            }
            // Entities settled and released: no longer marked, if this session still holds their shard
            // (a stale session must not clear a mark the shard's new owner relies on). Before any row is
            // read below, which marks its stream again.
            if !settled.isEmpty {
                var parameters: [PostgresValue] = [.text(schema)]
                for (stream, _) in settled { parameters.append(.text(stream)) }
                let list = (2...(settled.count + 1)).map { "$\($0)" }.joined(separator: ",")
                try connection.execute(
                    """
                    DELETE FROM \(schema).awake w WHERE w.stream IN (\(list)) AND EXISTS (
                        SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                          AND l.objsubid = 2 AND l.objid::bigint = w.shard
                          AND l.classid::bigint = (hashtext($1)::bigint + 4294967296) % 4294967296
                    )
                    """,
                    parameters
                )
            }
            // The entities of the shards just taken that may have work under way (marked in `awake`):
            // recovered at once, so what they had under way on the node that owned them before (a job, a
            // retry) resumes without waiting for an event. Settled ones stay on disk.
            var wake: [(String, Int)] = []
            if !taken.isEmpty {
                let list = taken.sorted().map(String.init).joined(separator: ",")
                let found = try connection.execute(
                    "SELECT stream, shard::bigint FROM \(schema).awake WHERE shard IN (\(list))"
                )
                for index in found.rows.indices {
                    wake.append((try found.text(index, 0), Int(try found.int(index, 1))))
                }
            }
            let (rows, marked) = try Self.take(
                from: view.owned,
                skipping: failed,
                known: { known.contains($0) },
                batch: batch,
                schema: schema,
                on: connection
            )
            if sweep {
                for _ in 0..<5 {
                    let swept = try connection.execute(
                        """
                        DELETE FROM \(schema).replies WHERE ctid IN (
                            SELECT ctid FROM \(schema).replies
                            WHERE asked_at < now() - make_interval(secs => $1::bigint / 1000.0)
                            LIMIT 10000)
                        """,
                        [.int(kept)]
                    )
                    if swept.affected < 10_000 { break }
                }
            }
            return Tick(
                ownership: view,
                rows: rows,
                wake: wake,
                marked: marked,
                cleared: settled.map(\.0)
            )
        }
        ledger.withLock { ledger in
            ledger.ownership = outcome.ownership
            for (entity, shard) in outcome.wake { ledger.shardOf[entity] = shard }
            let now = ContinuousClock.now
            for entity in outcome.cleared {
                ledger.awake[entity] = nil
                ledger.lastActive[entity] = nil
            }
            for (entity, shard) in outcome.marked { ledger.awake[entity] = shard }
            for (entity, shard) in outcome.wake {
                ledger.awake[entity] = shard
                ledger.lastActive[entity] = now
            }
        }
        for (entity, _) in outcome.wake { group.wake(entity) }
        return outcome.rows
    }

    /// Between heartbeats, woken by a notification: reads the inbox rows of the shards the node owns
    /// that are not in flight already, and marks their entities, as a heartbeat does, without the
    /// heartbeat's membership work.
    private func read() async throws -> [InboxRow] {
        try await control.run { [self] connection throws(PostgresError) in try read(on: connection) }
    }

    /// Waits on the control connection for a notification of new inbox rows (until `due`, the next
    /// heartbeat, at the latest), then reads them as ``read()`` does, in the same turn of the
    /// connection's queue. `nil` when it read nothing: the wait ran out, the heartbeat is due, or the
    /// node was woken to stop.
    private func waitThenRead(until due: ContinuousClock.Instant) async throws -> [InboxRow]? {
        try await control.run { [self] connection throws(PostgresError) -> [InboxRow]? in
            let left = max(.milliseconds(1), due - ContinuousClock.now)
            let woken = try connection.waitForNotification(
                milliseconds: Int32(clamping: left.wholeMilliseconds),
                wakeup: wakeup
            )
            guard woken, ContinuousClock.now < due, !ledger.withLock({ $0.stopping }) else { return nil }
            return try read(on: connection)
        }
    }

    /// ``read()``'s work, on the control connection's queue.
    private func read(on connection: PostgresConnection) throws(PostgresError) -> [InboxRow] {
        let (owned, failed, inFlight) = ledger.withLock { ledger in
            ledger.reading = true
            return (ledger.ownership.owned, Set(ledger.failed.filter(\.value.failing).keys), ledger.inFlight)
        }
        guard !owned.isEmpty else { return [] }
        // The marks are looked up for the rows read, not copied whole into a set (thousands of names
        // hashed for each read of a few rows).
        let (rows, marked) = try Self.take(
            from: owned,
            skipping: failed,
            excluding: inFlight,
            known: { [ledger] stream in ledger.withLock { $0.awake[stream] != nil } },
            batch: configuration.batch,
            schema: configuration.schema,
            on: connection
        )
        if !marked.isEmpty {
            ledger.withLock { ledger in
                for (entity, shard) in marked { ledger.awake[entity] = shard }
            }
        }
        return rows
    }

    /// Reads the inbox rows of the shards `owned` in id order (at most `batch`, none of the `failed`
    /// streams, none of the rows `excluded`), and marks in `awake` the streams among them not `known`
    /// to be marked: before they are sent their events, so an entity with work under way is always
    /// marked (a crash between the two leaves a mark too many, never one too few). Returns the rows and
    /// the streams it marked. Rows inserted under a spelling of their stream's name other than the
    /// composed one are moved to the composed name's shard, and they and the later rows of their
    /// entities come back marked ``InboxRow/skipped``.
    static func take(
        from owned: Set<Int>,
        skipping failed: Set<String>,
        excluding excluded: Set<Int64> = [],
        known: (String) -> Bool,
        batch: Int,
        schema: String,
        on connection: PostgresConnection
    ) throws(PostgresError) -> (rows: [InboxRow], marked: [(String, Int)]) {
        var rows: [InboxRow] = []
        if !owned.isEmpty {
            // The rows of entities stopped by data they cannot read wait for a node that can (after a
            // fix, a restart): read, they would fill every batch and starve the others.
            let found = try connection.execute(
                """
                SELECT id, stream, shard::bigint, payload, key, reply, digest FROM \(schema).inbox
                WHERE shard = ANY($1::integer[]) AND stream <> ALL($2::text[]) AND id <> ALL($4::bigint[])
                ORDER BY id LIMIT $3
                """,
                [
                    .ints(owned.sorted().map(Int64.init)), .texts(failed.sorted()), .int(Int64(batch)),
                    // In any order (a set to the query): the rows in flight since the last heartbeat, up
                    // to a few thousand, were sorted for every read.
                    .ints(Array(excluded)),
                ],
                prepared: true
            )
            for index in found.rows.indices {
                var request: InboxRow.Request?
                if found.rows[index][4] != nil {
                    request = InboxRow.Request(
                        key: try found.text(index, 4),
                        reply: UInt64(bitPattern: try found.int(index, 5)),
                        digest: UInt64(bitPattern: try found.int(index, 6))
                    )
                }
                rows.append(
                    InboxRow(
                        id: try found.int(index, 0),
                        stream: try found.text(index, 1),
                        shard: Int(try found.int(index, 2)),
                        payload: try found.bytes(index, 3),
                        request: request
                    )
                )
            }
        }
        // A row a program inserted itself under another spelling of its stream's name than the composed
        // one the library sends: its shard is that spelling's, and the entity's events go to the
        // composed name's, which may be another node's. Moved there (and the nodes woken), not taken;
        // the later rows of its entity in this read are held back, so on this node the entity's rows
        // are still sent in id order. Both stay in the rows returned, marked, so the caller's view of
        // what the read covered (how many rows, up to which id) is the read's.
        var strays: [(id: Int64, stream: String)] = []
        for index in rows.indices {
            if !StreamName.isCanonical(rows[index].stream) {
                strays.append((rows[index].id, StreamName.canonical(rows[index].stream)))
                rows[index].skipped = true
            } else if strays.contains(where: { $0.stream == rows[index].stream }) {
                rows[index].skipped = true
            }
        }
        if !strays.isEmpty {
            try connection.execute(
                """
                UPDATE \(schema).inbox i SET stream = v.stream, shard = \(schema).shard_of(v.stream, 64)
                FROM unnest($1::bigint[], $2::text[]) AS v (id, stream) WHERE i.id = v.id
                """,
                [.ints(strays.map(\.id)), .texts(strays.map(\.stream))]
            )
            try connection.execute("SELECT pg_notify($1, '')", [.text(PostgresSchema.inboxChannel(schema))])
        }
        var marked: [(String, Int)] = []
        var seen: Set<String> = []
        for row in rows where !row.skipped && seen.insert(row.stream).inserted && !known(row.stream) {
            marked.append((row.stream, row.shard))
        }
        if !marked.isEmpty {
            // One prepared statement whatever the count: a list of values was a new statement to parse
            // and plan for each count.
            try connection.execute(
                """
                INSERT INTO \(schema).awake (stream, shard)
                SELECT stream, shard::integer FROM unnest($1::text[], $2::bigint[]) AS v (stream, shard)
                ON CONFLICT DO NOTHING
                """,
                [.texts(marked.map(\.0)), .ints(marked.map { Int64($0.1) })],
                prepared: true
            )
        }
        return (rows, marked)
    }

    /// The application name of a node's store writer, so a node taking a shard never ends its own.
    static func writerName(_ node: String) -> String { "effectloop store \(node)" }

    /// Runs `statement` (which takes a lock) in a transaction of its own that waits at most `timeout` (a
    /// PostgreSQL interval, such as `500ms`) for any lock: past it, it throws (SQLSTATE `55P03`). A session
    /// lock taken stays held after the transaction; a transaction lock is let go with it.
    static func lock(
        _ statement: String,
        _ parameters: [PostgresValue],
        within timeout: String,
        on connection: PostgresConnection
    ) throws(PostgresError) {
        try connection.execute("BEGIN")
        do throws(PostgresError) {
            try connection.execute("SET LOCAL lock_timeout = '\(timeout)'")
            try connection.execute(statement, parameters)
            try connection.execute("COMMIT")
        } catch {
            if error.kind != .connection { _ = try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    /// Once the node holds `shard`'s lock: waits for the appends to the shard still under way on other
    /// connections (each holds the shard's fence shared until it ends), so what they commit is read from
    /// here on and what they do not is fenced. An append that does not end within half a second belongs
    /// to a node that lost the shard and is stuck (paused, partitioned): its connection is ended by the
    /// server, which rolls the append back (the node sees it fail and stops), and the wait goes on. Only
    /// store connections of this database are ended (their application name starts `effectloop store`),
    /// never this node's own; every node must connect as the same role (or one granted
    /// `pg_signal_backend`). Throws when the wait still fails: the caller then leaves the shard.
    static func awaitFence(
        of shard: Int,
        schema: String,
        node: String,
        on connection: PostgresConnection
    )
        throws(PostgresError)
    {
        func wait(_ timeout: String) throws(PostgresError) {
            try lock(
                "SELECT pg_advisory_xact_lock(hashtext($1 || '.fence'), $2::integer)",
                [.text(schema), .int(Int64(shard))],
                within: timeout,
                on: connection
            )
        }
        do {
            try wait("500ms")
        } catch  where error.sqlState == "55P03" {
            try connection.execute(
                """
                SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.mode = 'ShareLock'
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.classid::bigint = (hashtext($1 || '.fence')::bigint + 4294967296) % 4294967296
                  AND l.objid::bigint = $2 AND a.application_name LIKE 'effectloop store %'
                  AND a.application_name <> left($3, 63)
                """,
                [.text(schema), .int(Int64(shard)), .text(writerName(node))]
            )
            try wait("10s")
        }
    }

    /// Sends each row not yet in flight to its entity, in id order; rows the store would refuse, or that
    /// do not decode, go to `inbox_dead`. `whole`: `rows` are every row of the owned shards up to the
    /// batch's size (a heartbeat's read), so the rows in flight not among them were committed; a read
    /// between heartbeats leaves the rows in flight out.
    private func dispatch(_ rows: [InboxRow], whole: Bool) {
        var undecodable: [(InboxRow, String)] = []
        var fresh: [(InboxRow, Event)] = []
        var repeats: [Int64] = []
        // Decoded before the ledger is locked: the store's writer and the entities' answers wait on it.
        let decoded = rows.map { row in Result { try events.decode(row.payload) } }
        ledger.withLock { ledger in
            // Rows seen in flight and no longer in the inbox were committed.
            if whole {
                let seen = Set(rows.map(\.id))
                let horizon = rows.count < configuration.batch ? Int64.max : (rows.last?.id ?? Int64.max)
                ledger.inFlight = ledger.inFlight.filter { seen.contains($0) || $0 > horizon }
                if !ledger.answered.isEmpty {
                    repeats = rows.filter { !$0.skipped }.map(\.id).filter(ledger.answered.contains)
                    ledger.answered = ledger.answered.filter { seen.contains($0) || $0 > horizon }
                }
            }
            defer {
                ledger.reading = false
                ledger.committedDuringRead.removeAll(keepingCapacity: true)
            }
            for (row, decoded) in zip(rows, decoded)
            where !row.skipped && !ledger.inFlight.contains(row.id) && !ledger.committedDuringRead.contains(row.id)
                && ledger.ownership.owned.contains(row.shard)
            {
                // A row the store would refuse (a name it cannot index, say) must not reach a batch of
                // appends, where it would fail the others and stop the entity: it goes to the dead letters.
                if let problem = PostgresEventStore.problem(with: [row.payload], stream: row.stream) {
                    undecodable.append((row, problem))
                    continue
                }
                if let request = row.request, let problem = KeyLimits.problem(with: request.key) {
                    undecodable.append((row, problem))
                    continue
                }
                do {
                    fresh.append((row, try decoded.get()))
                    ledger.inFlight.insert(row.id)
                    ledger.shardOf[row.stream] = row.shard
                    ledger.lastActive[row.stream] = .now
                    ledger.dispatched += 1
                } catch {
                    undecodable.append((row, "\(error)"))
                }
            }
        }
        for (row, event) in fresh {
            guard let request = row.request else {
                _ = entities.send(Inboxed(inboxRow: row.id, event: event, received: row.payload), row.stream)
                continue
            }
            // A request: its answer, once recorded, is written where its caller reads it (by the append
            // that records it, or below, for a repeat answered from the record).
            let call = DurableCall(
                event: Inboxed(inboxRow: row.id, event: event, received: row.payload),
                key: request.key,
                fingerprint: request.digest,
                reply: request.reply
            )
            let waiter = ForwardedRequest(row: row.id, stream: row.stream, key: request.key, reply: request.reply) {
                [weak self] request, outcome in
                self?.concluded(request, outcome)
            }
            entities.forward(call, row.stream, waiter)
        }
        if !undecodable.isEmpty { bury(undecodable) }
        if !repeats.isEmpty { conclude(repeats.map { ($0, nil) }) }
    }

    /// What became of a request this session forwarded to its entity.
    private func concluded(_ request: ForwardedRequest, _ outcome: ForwardedRequest.Outcome) {
        switch outcome {
        case .answered(recorded: nil):
            // Recorded by the append that decided it; the row, if a repeat, is deleted when next seen.
            ledger.withLock { _ = $0.answered.insert(request.row) }
        case .answered(recorded: let recorded?):
            // A repeat answered from the record: no append consumed its row, nor wrote the answer.
            conclude([(request.row, ReplyRow(stream: request.stream, reply: request.reply, recorded: recorded))])
        case .failed(.keyReused(let key)):
            conclude([
                (request.row, ReplyRow(stream: request.stream, reply: request.reply, failure: ("keyReused", key)))
            ])
        case .failed(.invalid(let reason)):
            conclude([
                (request.row, ReplyRow(stream: request.stream, reply: request.reply, failure: ("invalid", reason)))
            ])
        case .failed(.rejected(.invalid)):
            conclude([
                (
                    request.row,
                    ReplyRow(stream: request.stream, reply: request.reply, failure: ("invalid", "\(Rejection.invalid)"))
                )
            ])
        case .failed:
            // The entity stopped or failed, or the session ends: the row stays for the shard's next owner
            // (or this session's retry of the entity).
            break
        }
    }

    /// Deletes request rows no append consumed (repeats, refusals) and writes the answers or failures
    /// given with them where their callers read them, notifying the callers.
    private func conclude(_ rows: [(Int64, ReplyRow?)]) {
        let schema = configuration.schema
        control.schedule { [control, weak self] in
            let outcome = control.runInline { connection throws(PostgresError) in
                // Both or neither: a row deleted without its answer would leave its caller waiting.
                try connection.execute("BEGIN")
                do throws(PostgresError) {
                    try connection.execute(
                        "DELETE FROM \(schema).inbox WHERE id = ANY($1::bigint[])",
                        [.ints(rows.map(\.0))],
                        prepared: true
                    )
                    let answers = rows.compactMap(\.1)
                    if !answers.isEmpty { try PostgresBatch.answer(answers, schema: schema, on: connection) }
                    try connection.execute("COMMIT")
                } catch {
                    if error.kind != .connection { _ = try? connection.execute("ROLLBACK") }
                    throw error
                }
            }
            // Failed: the rows are sent to their entities again (which answer them from the record again).
            if case .failure = outcome {
                self?.ledger.withLock { ledger in for (row, _) in rows { ledger.inFlight.remove(row) } }
            }
        }
    }

    /// Moves rows that cannot be processed to `inbox_dead`, with why.
    private func bury(_ rows: [(InboxRow, String)]) {
        let schema = configuration.schema
        control.schedule { [control] in
            _ = control.runInline { connection throws(PostgresError) in
                for (row, reason) in rows {
                    try connection.execute(
                        """
                        WITH moved AS (DELETE FROM \(schema).inbox WHERE id = $1 RETURNING id, stream, payload, key, reply)
                        INSERT INTO \(schema).inbox_dead (id, stream, payload, reason, key, reply)
                        SELECT id, stream, payload, $2, key, reply FROM moved
                        """,
                        [.int(row.id), .text(reason)]
                    )
                }
                // A request's caller hears why, rather than waiting for its timeout.
                let failed = rows.compactMap { row, reason in
                    row.request.map {
                        ReplyRow(
                            stream: row.stream,
                            reply: $0.reply,
                            failure: ("invalid", "the request cannot be processed: \(reason)")
                        )
                    }
                }
                if !failed.isEmpty { try PostgresBatch.answer(failed, schema: schema, on: connection) }
            }
        }
        ledger.withLock { $0.dead += rows.count }
    }

    /// Passivates marked entities that are settled (their state resumes nothing) and have had no event for
    /// ``ClusterNode/Configuration/passivateSettledAfter``, at most 1,000 a heartbeat; returns them, for
    /// their marks to be cleared. So a node keeps in memory, and a taker wakes, the entities with work
    /// under way, not every entity it ever served.
    private func passivateSettled() -> [(String, Int)] {
        let quietFor = configuration.passivateSettledAfter
        let now = ContinuousClock.now
        let candidates = ledger.withLock { ledger -> [(String, Int)] in
            var candidates: [(String, Int)] = []
            for (entity, shard) in ledger.awake where ledger.ownership.owned.contains(shard) {
                // Marked but never sent an event here (its row dead-lettered, say): quiet from now.
                guard let last = ledger.lastActive[entity] else {
                    ledger.lastActive[entity] = now
                    continue
                }
                if now - last >= quietFor { candidates.append((entity, shard)) }
            }
            return candidates
        }
        var settled: [(String, Int)] = []
        var busy: [String] = []
        for (entity, shard) in candidates {
            guard settled.count < 1_000 else { break }
            // A failed entity, one not recovered yet, or one with work under way stays marked, and is
            // looked at again after another quiet period (so entities that never settle do not hold back
            // those that do).
            guard let state = group.state(of: entity), resume(state).isEmpty, group.passivate(entity) else {
                busy.append(entity)
                continue
            }
            settled.append((entity, shard))
        }
        if !busy.isEmpty {
            ledger.withLock { ledger in
                for entity in busy where ledger.awake[entity] != nil { ledger.lastActive[entity] = now }
            }
        }
        return settled
    }

    /// The shards being handed over whose entities are all passivated now (their events committed).
    private func releasable() -> Set<Int> {
        let (releasing, shardOf) = ledger.withLock { ($0.ownership.releasing, $0.shardOf) }
        guard !releasing.isEmpty else { return [] }
        var quiet = releasing
        for (entity, shard) in shardOf where releasing.contains(shard) {
            if group.state(of: entity) != nil && !group.passivate(entity) { quiet.remove(shard) }
        }
        ledger.withLock { ledger in
            // Another node owns these shards' marks from now on.
            for (entity, shard) in ledger.awake where quiet.contains(shard) {
                ledger.awake[entity] = nil
                ledger.lastActive[entity] = nil
            }
            ledger.shardOf = ledger.shardOf.filter { !quiet.contains($0.value) }
        }
        return quiet
    }

    /// Leaves the membership (best effort: a node that cannot is forgotten after the timeout).
    private func leave() async {
        let (schema, name, holder) = (configuration.schema, self.name, self.holder)
        _ = try? await control.run { connection throws(PostgresError) in
            // Only the row this session wrote: after a restart under the same name it may be another's.
            try connection.execute(
                "DELETE FROM \(schema).nodes WHERE node = $1 AND session_pid = $2::integer",
                [.text(name), .int(Int64(holder))]
            )
        }
    }
}

/// One inbox row, as a node reads it.
struct InboxRow: Sendable {
    /// What a request's row carries beside its event.
    struct Request: Sendable {
        var key: String
        var reply: UInt64
        var digest: UInt64
    }

    var id: Int64
    var stream: String
    var shard: Int
    var payload: [UInt8]
    /// For a request (from ``ClusterClient``), its key, reply address and digest; `nil` for an event.
    var request: Request? = nil
    /// Not to be sent now: moved to its composed name's shard (a row inserted under another spelling),
    /// or held back behind such a row of its entity. Read again later.
    var skipped = false
}

/// What one heartbeat found and did.
struct Tick: Sendable {
    /// The ownership view after the heartbeat.
    var ownership: Ownership
    var rows: [InboxRow]
    var wake: [(String, Int)]
    /// The streams marked in `awake` before their rows were sent, with their shards.
    var marked: [(String, Int)]
    /// The streams whose mark was cleared (settled and released).
    var cleared: [String]
}

/// Why a cluster node stopped on its own.
public enum ClusterError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The connection holding the node's shard locks broke: the locks may be gone, so the node stops
    /// rather than work on shards it may no longer own.
    case connectionLost(String)
    /// An append for `stream` was refused because another node had written it: this node had lost the
    /// shard (paused, partitioned). It stops; the stream's owner continues.
    case fenced(stream: String, reason: String)
    /// The store failed an append for `stream` (the database refused or was unreachable): the node's
    /// session ends, and the node joins again.
    case storeFailed(stream: String, reason: String)
    /// The entity of `stream` stopped on data it cannot read (an event or snapshot that does not decode,
    /// damage, an event that does not encode): reported, not thrown. The node and its other entities go
    /// on; that entity's rows wait in the inbox, and it is tried again after the membership timeout
    /// (twice as long after each further failure, up to 64 times it), so a fixed record or a new release
    /// lets it go on.
    case entityFailed(stream: String, reason: String)
    /// Another process joined the cluster under this node's name (a restart while this one was paused
    /// or cut off): this one stops.
    case superseded(String)

    /// A sentence saying why.
    public var description: String {
        switch self {
        case .connectionLost(let reason): "the node's connection to the database broke: \(reason)"
        case .fenced(let stream, let reason): "another node owns stream '\(stream)' now (\(reason))"
        case .storeFailed(let stream, let reason): "the store failed stream '\(stream)': \(reason)"
        case .entityFailed(let stream, let reason): "entity '\(stream)' stopped: \(reason)"
        case .superseded(let reason): "the node was superseded: \(reason)"
        }
    }
}

extension ClusterNode: Runnable {}

extension ClusterNode {
    /// The node as a ``/LoopRuntime/Runnable`` whose ``/LoopRuntime/Runnable/run()`` passes to `onFailure`
    /// each failure the node rides out (``run(onFailure:)``): what a service framework's generic wrapper
    /// runs, so that a lost session or an entity stopped by data it cannot read reaches the service's
    /// log. The node's own ``run()`` passes them nowhere.
    ///
    /// ```swift
    /// let service = RunnableService(node.runnable { logger.warning("\($0)") })
    /// ```
    public func runnable(onFailure: @escaping @Sendable (ClusterError) -> Void) -> some Runnable {
        FailureForwardingClusterNode(node: self, failed: onFailure)
    }
}

/// ``ClusterNode/runnable(onFailure:)``'s node.
private final class FailureForwardingClusterNode<State: Sendable, Event: Sendable, Effect: Sendable>: Runnable {
    let node: ClusterNode<State, Event, Effect>
    let failed: @Sendable (ClusterError) -> Void

    init(node: ClusterNode<State, Event, Effect>, failed: @escaping @Sendable (ClusterError) -> Void) {
        self.node = node
        self.failed = failed
    }

    @discardableResult
    func run() async throws -> LoopReport {
        try await node.run(onFailure: failed)
    }

    func stop(gracePeriod: Duration) {
        node.stop(gracePeriod: gracePeriod)
    }
}
