import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport
import Testing

/// Nodes of entities that add up what they are sent (the benchmark's cluster program).
enum Counter {
    typealias Event = ClusterTally.Event

    static let program = ClusterTally.program

    static func node(
        _ database: String,
        _ name: String,
        outageLimit: Duration = .seconds(60),
        batch: Int = 2_000
    ) async throws -> ClusterNode<Int, Event, Never> {
        try await ClusterNode(
            connecting: database,
            name: name,
            program: program,
            effects: EffectRouter(),
            events: JSONCodec<Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(
                heartbeat: .milliseconds(100),
                membershipTimeout: .seconds(1),
                batch: batch,
                outageLimit: outageLimit
            )
        )
    }

    /// What a node reported while it ran.
    final class Reports: Sendable {
        private let reports = Locked<[ClusterError]>([])

        var all: [ClusterError] { reports.withLock { $0 } }

        func record(_ report: ClusterError) { reports.withLock { $0.append(report) } }
    }
}

/// Entities with work under way when their total is odd: `resume` restarts a chore for them.
enum Chores {
    enum Effect: Sendable { case chore }

    static let program = DurableProgram<Int, ClusterTally.Event, Effect>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount): total += amount
            }
            return []
        },
        resume: { total in total % 2 == 1 ? [.chore] : [] }
    )

    static func node(_ database: String, _ name: String) async throws -> ClusterNode<Int, ClusterTally.Event, Effect> {
        try await ClusterNode(
            connecting: database,
            name: name,
            program: program,
            effects: EffectRouter<Effect, ClusterTally.Event>().route({ $0 }, to: ClosureSyncEffectHandler { _, _ in }),
            events: JSONCodec<ClusterTally.Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(
                heartbeat: .milliseconds(100),
                membershipTimeout: .seconds(1),
                passivateSettledAfter: .milliseconds(300)
            )
        )
    }
}

/// Entities that ring an alarm a number of seconds after they are sent it: a durable timer, whose effect
/// sends the entity `rang` back.
enum Alarms {
    enum Event: Codable, Sendable, Equatable {
        case set(seconds: Int)
        case rang
    }

    enum Effect: Codable, Sendable, Equatable, ManagedEffect {
        case ring(after: Int)

        var lifecycle: EffectLifecycle {
            switch self {
            case .ring(let seconds): .delayed(by: .seconds(seconds), key: "alarm")
            }
        }
    }

    /// How many alarms rang.
    static let program = DurableProgram<Int, Event, Effect>(
        initial: 0,
        update: Update { rung, event in
            switch event {
            case .set(let seconds): return [.ring(after: seconds)]
            case .rang:
                rung += 1
                return []
            }
        }
    )
    .keepingTimers()

    static func node(_ database: String, _ name: String) async throws -> ClusterNode<Int, Event, Effect> {
        try await ClusterNode(
            connecting: database,
            name: name,
            program: program,
            effects: EffectRouter<Effect, Event>().route({ $0 }, to: ClosureEffectHandler { _, send in send(.rang) }),
            events: JSONCodec<Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(heartbeat: .milliseconds(100), membershipTimeout: .seconds(1))
        )
    }
}

@Suite("ClusterNode", .serialized)
struct ClusterNodeTests {
    /// A durable timer outlives its node: the entity stays marked while its timer waits, so the node
    /// that takes its shard recovers it and the alarm rings once, when it was due; the row that set it
    /// is consumed once (its record carries the timer beside the event).
    @Test func aTimerSetOnANodeThatStopsRingsOnTheNodeThatTakesItsShard() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let a = try await Alarms.node(database, "a")
        let runningA = Task { try await a.run() }
        try await Self.eventually("a to own every shard") { a.ownedShards.count == 64 }
        let inbox = try await PostgresInbox(connecting: database)
        // Long enough that node a stops before it is due, however loaded the machine.
        try await inbox.send(try JSONCodec<Alarms.Event>().encode(.set(seconds: 10)), to: "alarm-1")
        await inbox.close()
        try await Self.eventually("the alarm to be set") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'alarm-1'") == "1"
        }
        a.stop()
        _ = try await runningA.value
        #expect(a.state(of: "alarm-1") == nil || a.state(of: "alarm-1") == 0)

        let b = try await Alarms.node(database, "b")
        let runningB = Task { try await b.run() }
        try await Self.eventually("the alarm to ring on b") { b.state(of: "alarm-1") == 1 }
        // Rung once: the set, the ring's start and `rang` are its records (the start may ride with `rang`).
        try await Self.eventually("the ring to be recorded") {
            let records = try await Self.query(
                database,
                "SELECT count(*) FROM effectloop.events WHERE stream = 'alarm-1'"
            )
            return (Int(records) ?? 0) >= 2
        }
        b.stop()
        _ = try await runningB.value
        #expect(b.state(of: "alarm-1") == nil || b.state(of: "alarm-1") == 1)
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0")
    }

    /// Sends `count` events, `.add(1)` each, round-robin over `entities` entities, through the inbox.
    static func send(_ count: Int, over entities: Int, to database: String) async throws {
        let inbox = try await PostgresInbox(connecting: database)
        let codec = JSONCodec<Counter.Event>()
        for index in 0..<count { try await inbox.send(try codec.encode(.add(1)), to: "entity-\(index % entities)") }
        await inbox.close()
    }

    /// Waits until `condition` holds (checked every 50 ms); fails the test after 60 s rather than hang.
    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<1_200 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("timed out waiting for \(what)")
    }

    static func query(_ database: String, _ sql: String) async throws -> String {
        try await TemporaryPostgres.psql(database, sql: sql).filter { !$0.isWhitespace }
    }

    /// Every inbox row became exactly one event: as many events as were sent, each inbox id once, and
    /// every stream's versions 1...n without a gap.
    static func expectExactlyOnce(_ database: String, sent: Int) async throws {
        #expect(try await query(database, "SELECT count(*) FROM effectloop.inbox") == "0")
        #expect(try await query(database, "SELECT count(*) FROM effectloop.events") == "\(sent)")
        #expect(try await query(database, "SELECT count(DISTINCT inbox_id) FROM effectloop.events") == "\(sent)")
        let gaps = try await query(
            database,
            "SELECT count(*) FROM (SELECT stream, max(version) AS top, count(*) AS n FROM effectloop.events GROUP BY stream) s WHERE top <> n"
        )
        #expect(gaps == "0")
    }

    @Test func aNodeProcessesEveryInboxRowExactlyOnce() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        try await Self.send(1_000, over: 100, to: database)
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        #expect(node.ownedShards.count == 64)
        #expect((0..<100).map { node.state(of: "entity-\($0)") ?? 0 }.reduce(0, +) == 1_000)
        node.stop()
        _ = try await running.value
        try await Self.expectExactlyOnce(database, sent: 1_000)
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.nodes") == "0")
    }

    @Test func twoNodesSplitTheShardsAndAThirdTakesItsShare() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let (a, b) = (try await Counter.node(database, "a"), try await Counter.node(database, "b"))
        let runningA = Task { try await a.run() }
        let runningB = Task { try await b.run() }
        try await Self.eventually("the shards to be split") {
            a.ownedShards.count + b.ownedShards.count == 64 && a.ownedShards.isDisjoint(with: b.ownedShards)
                && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        try await Self.send(600, over: 60, to: database)
        let c = try await Counter.node(database, "c")
        let runningC = Task { try await c.run() }
        try await Self.eventually("the third node to own its share") {
            let owned = [a, b, c].map(\.ownedShards)
            return owned.map(\.count).reduce(0, +) == 64 && owned.allSatisfy { !$0.isEmpty }
                && owned[0].isDisjoint(with: owned[1]) && owned[1].isDisjoint(with: owned[2])
                && owned[0].isDisjoint(with: owned[2])
        }
        try await Self.send(600, over: 60, to: database)
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        for node in [a, b, c] { node.stop() }
        for running in [runningA, runningB, runningC] { _ = try await running.value }
        try await Self.expectExactlyOnce(database, sent: 1_200)
    }

    @Test func aNodeWhoseConnectionDiesJoinsAgainAndNothingIsLost() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let (a, b) = (try await Counter.node(database, "a"), try await Counter.node(database, "b"))
        let reports = Counter.Reports()
        // Node a runs as a service framework runs it (`Runnable.run()`), reporting what it rides out.
        let reporting = a.runnable(onFailure: reports.record)
        let runningA = Task { try await reporting.run() }
        let runningB = Task { try await b.run() }
        try await Self.eventually("the shards to be split") {
            a.ownedShards.count + b.ownedShards.count == 64 && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        try await Self.send(500, over: 50, to: database)
        // The connection holding node a's shard locks is cut, as if its machine died: the locks go with it.
        // Only that one: an append in flight holds its shard's fence, an advisory lock with the same
        // objid, on the store's connection, which must not be cut too.
        try await TemporaryPostgres.psql(
            database,
            sql: """
                SELECT pg_terminate_backend(l.pid, 10000) FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.objid = \(a.ownedShards.first ?? 0)
                AND s.application_name = 'effectloop node a'
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """
        )
        // Node a notices, lets its shards go, connects again and takes its share back.
        try await Self.eventually("a to join again") { a.interruptions == 1 }
        try await Self.send(500, over: 50, to: database)
        try await Self.eventually("both to own shards again") {
            a.ownedShards.count + b.ownedShards.count == 64 && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        // Held by a's new lock session, as the database sees it.
        let held = try await Self.query(
            database,
            """
            SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND s.application_name = 'effectloop node a'
            """
        )
        #expect(held == "\(a.ownedShards.count)" && held != "0")
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        // The cut is seen by whichever meets it first (Cluster.md, "Fencing"): the node's control connection,
        // or an entity's append that finds the shard's lock no longer held by it.
        switch reports.all.first {
        case .connectionLost?, .fenced?: break
        default:
            Issue.record("reported \(reports.all)")
            return
        }
        reporting.stop(gracePeriod: .seconds(30))
        b.stop()
        _ = try await runningA.value
        _ = try await runningB.value
        try await Self.expectExactlyOnce(database, sent: 1_000)
    }

    /// `pg_ctl restart -m fast` while two nodes process events: every session ends; both nodes connect
    /// again, take the shards back and process every event once; neither stops.
    @Test func aDatabaseRestartIsRiddenOutAndNothingIsLost() async throws {
        // A server of its own: a restart ends every session on it, other suites' too.
        let server = try await TemporaryPostgres(durable: false)
        defer { server.stop() }
        let database = try await server.createDatabase()
        let (a, b) = (try await Counter.node(database, "a"), try await Counter.node(database, "b"))
        let runningA = Task { try await a.run() }
        let runningB = Task { try await b.run() }
        try await Self.eventually("the shards to be split") {
            a.ownedShards.count + b.ownedShards.count == 64 && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        try await Self.send(1_000, over: 100, to: database)
        try await Self.eventually("some events to commit") {
            (Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0) > 0
        }
        try await server.restart()
        try await Self.send(1_000, over: 100, to: database)
        try await Self.eventually("both to join again") { a.interruptions >= 1 && b.interruptions >= 1 }
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        try await Self.eventually("both to own shards again") {
            a.ownedShards.count + b.ownedShards.count == 64 && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        for node in [a, b] { node.stop() }
        _ = try await runningA.value
        _ = try await runningB.value
        try await Self.expectExactlyOnce(database, sent: 2_000)
    }

    /// A database that stays away longer than the outage limit: the node stops, saying so.
    @Test func aNodeGivesUpWhenTheDatabaseStaysAwayPastTheOutageLimit() async throws {
        let server = try await TemporaryPostgres(durable: false)
        defer { server.stop() }
        let database = try await server.createDatabase()
        let node = try await Counter.node(database, "solo", outageLimit: .seconds(1))
        let running = Task { try await node.run() }
        try await Self.eventually("the node to own every shard") { node.ownedShards.count == 64 }
        try await server.shutDown()
        do {
            _ = try await running.value
            Issue.record("the node ran on without its database")
        } catch let error as ClusterError {
            guard case .connectionLost = error else {
                Issue.record("stopped with \(error)")
                return
            }
        }
        #expect(node.interruptions == 1)
    }

    /// Remembered work: settled entities are released and unmarked; a node taking the shards recovers
    /// only the entities with work under way, not every stream the shards ever had.
    @Test func aTakerRecoversOnlyTheEntitiesWithWorkUnderWay() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let a = try await Chores.node(database, "a")
        let runningA = Task { try await a.run() }
        // Entity i gets 1 when i is odd (work under way), 2 when even (settled).
        let inbox = try await PostgresInbox(connecting: database)
        let codec = JSONCodec<ClusterTally.Event>()
        for index in 0..<100 {
            try await inbox.send(try codec.encode(.add(index % 2 == 0 ? 2 : 1)), to: "entity-\(index)")
        }
        await inbox.close()
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        let unsettled = (0..<50).map { "entity-\($0 * 2 + 1)" }.sorted()
        try await Self.eventually("the settled entities to be unmarked") {
            try await Self.query(database, "SELECT string_agg(stream, ',' ORDER BY stream) FROM effectloop.awake")
                == unsettled.joined(separator: ",")
        }
        // Released from memory too.
        #expect(a.state(of: "entity-0") == nil)
        #expect(a.state(of: "entity-1") == 1)
        a.stop()
        _ = try await runningA.value

        let b = try await Chores.node(database, "b")
        let runningB = Task { try await b.run() }
        try await Self.eventually("b to own every shard and recover what it wakes") {
            b.ownedShards.count == 64 && unsettled.allSatisfy { b.state(of: $0) == 1 }
        }
        #expect(b.recoveries == 50)
        #expect(b.state(of: "entity-0") == nil)
        // A settled entity sent an event later is recovered then, from its stream.
        let more = try await PostgresInbox(connecting: database)
        try await more.send(try codec.encode(.add(2)), to: "entity-0")
        await more.close()
        try await Self.eventually("entity-0 to be recovered") { b.state(of: "entity-0") == 4 }
        b.stop()
        _ = try await runningB.value
    }

    /// Remembered work at scale: shards holding 100,000 finished entities (streams written before, never
    /// marked) and 10 with work under way; a node taking the shards recovers the 10, not the 100,010.
    @Test func aTakerOfShardsHolding100000FinishedEntitiesRecoversThe10Unfinished() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let a = try await Chores.node(database, "a")
        let runningA = Task { try await a.run() }
        try await Self.eventually("a to own every shard") { a.ownedShards.count == 64 }
        // One event each (`add(2)`: settled), as the node's codec writes it.
        let payload = try InboxedCodec(JSONCodec<ClusterTally.Event>()).encode(Inboxed(inboxRow: nil, event: .add(2)))
        let hex = payload.map { String($0, radix: 16).count == 1 ? "0\(String($0, radix: 16))" : String($0, radix: 16) }
        _ = try await Self.query(
            database,
            """
            INSERT INTO effectloop.events (stream, version, payload)
            SELECT 'finished-' || i, 1, '\\x\(hex.joined())'::bytea FROM generate_series(1, 100000) i
            """
        )
        let inbox = try await PostgresInbox(connecting: database)
        let codec = JSONCodec<ClusterTally.Event>()
        for index in 0..<10 { try await inbox.send(try codec.encode(.add(1)), to: "unfinished-\(index)") }
        await inbox.close()
        try await Self.eventually("the 10 to be recorded") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.events WHERE stream LIKE 'unfinished-%'")
                == "10"
        }
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.awake") == "10")
        a.stop()
        _ = try await runningA.value

        let b = try await Chores.node(database, "b")
        let started = ContinuousClock.now
        let runningB = Task { try await b.run() }
        try await Self.eventually("b to own every shard and recover the unfinished") {
            b.ownedShards.count == 64 && (0..<10).allSatisfy { b.state(of: "unfinished-\($0)") == 1 }
        }
        let took = ContinuousClock.now - started
        #expect(b.recoveries == 10)
        #expect(b.state(of: "finished-1") == nil)
        print(
            "takeover of 64 shards holding 100,000 finished and 10 unfinished entities: \(b.recoveries) recovered in \(took)"
        )
        b.stop()
        _ = try await runningB.value
    }

    /// An entity whose stream holds an event it cannot decode stops alone, reported; the node and the
    /// other entities go on, even when the failed entity's rows would fill every batch the node reads.
    @Test func anEntityThatCannotReadItsStreamIsReportedAndTheNodeGoesOn() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo", batch: 5)
        let reports = Counter.Reports()
        let running = Task { try await node.run(onFailure: reports.record) }
        try await Self.eventually("the node to own every shard") { node.ownedShards.count == 64 }
        _ = try await Self.query(
            database,
            "INSERT INTO effectloop.events (stream, version, payload) VALUES ('entity-bad', 1, '\\x0102'::bytea)"
        )
        let inbox = try await PostgresInbox(connecting: database)
        for _ in 0..<10 { try await inbox.send(try JSONCodec<Counter.Event>().encode(.add(1)), to: "entity-bad") }
        await inbox.close()
        try await Self.send(10, over: 2, to: database)
        try await Self.eventually("the others' events to commit") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.events") == "11"
        }
        try await Self.eventually("the failure to be reported") { !reports.all.isEmpty }
        guard case .entityFailed(let stream, _)? = reports.all.first else {
            Issue.record("reported \(reports.all)")
            return
        }
        #expect(stream == "entity-bad")
        #expect(node.interruptions == 0)
        // Its rows stay in the inbox meanwhile.
        #expect(
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox WHERE stream = 'entity-bad'") == "10"
        )
        // The record is fixed (an event the program reads): the entity is tried again and goes on.
        let event = try InboxedCodec(JSONCodec<Counter.Event>()).encode(Inboxed(inboxRow: nil, event: .add(1)))
        let hex = event.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
        _ = try await Self.query(
            database,
            "UPDATE effectloop.events SET payload = '\\x\(hex)'::bytea WHERE stream = 'entity-bad'"
        )
        try await Self.eventually("the entity to be tried again and take its rows") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'entity-bad'") == "11"
        }
        #expect(node.state(of: "entity-bad") == 11)
        node.stop()
        _ = try await running.value
        // Reported once per failure: once, or again if a retry came before the fix.
        #expect(
            reports.all.allSatisfy {
                if case .entityFailed("entity-bad", _) = $0 { true } else { false }
            }
        )
    }

    /// A node's appends carry proof that it still holds their shards: once its lock session is gone
    /// and another took the shard, they are fenced and write nothing, while streams of shards it holds
    /// commit in the same batch.
    @Test func appendsForAShardTheNodeNoLongerHoldsAreFencedAndWriteNothing() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database, schema: "effectloop", inboxRowOf: nil)
        let holder = try PostgresConnection(database)
        let taker = try PostgresConnection(database)
        defer { taker.close() }
        let token: Int64 = 1 << 40
        func shard(_ stream: String) throws -> Int64 {
            try taker.execute("SELECT effectloop.shard_of($1, 64)::bigint", [.text(stream)]).int(0, 0)
        }
        let mine = "account-1"
        let other = try #require((2..<100).map { "account-\($0)" }.first { try shard($0) != shard(mine) })
        // A node's lock session holds its shard's lock, then the key its appends check (`token + shard`).
        _ = try holder.execute("SELECT pg_advisory_lock(hashtext('effectloop'), $1::integer)", [.int(try shard(mine))])
        store.fence(token: token, shards: 64)
        let notHeld = EventStoreError(.fenced(reason: "this node no longer holds the stream's shard"), stream: other)
        let unkeyed = EventStoreError(.fenced(reason: "this node no longer holds the stream's shard"), stream: mine)
        // The shard's lock alone is not enough: the key is let go first when a shard is released.
        await #expect(throws: unkeyed) { try await store.append([[1]], to: mine, expecting: 0) }
        _ = try holder.execute(
            "SELECT pg_advisory_lock($1::bigint + $2::integer)",
            [.int(token), .int(try shard(mine))]
        )
        #expect(try await store.append([[1]], to: mine, expecting: 0) == 1)
        await #expect(throws: notHeld) { try await store.append([[1]], to: other, expecting: 0) }
        // Another session holding the other shard's lock (and another token's key) does not make it ours.
        _ = try taker.execute(
            "SELECT pg_advisory_lock(hashtext('effectloop'), $1::integer), pg_advisory_lock($2::bigint + $1::integer)",
            [.int(try shard(other)), .int(token + 1_000)]
        )
        await #expect(throws: notHeld) { try await store.append([[1]], to: other, expecting: 0) }

        // The server ends the holder's session (a partition it noticed); another node takes the shard.
        holder.close()
        try await Self.eventually("the shard's lock to be free") {
            try taker.execute(
                "SELECT pg_try_advisory_lock(hashtext('effectloop'), $1::integer)::integer::bigint",
                [
                    .int(try shard(mine))
                ]
            ).int(0, 0) == 1
        }
        let fenced = EventStoreError(.fenced(reason: "this node no longer holds the stream's shard"), stream: mine)
        await #expect(throws: fenced) { try await store.append([[2]], to: mine, expecting: 1) }
        #expect(try await store.version(of: mine) == 1)
        #expect(try await store.version(of: other) == 0)
        await store.close()
    }

    /// A node taking a shard waits until no other node's lock session still holds its key for the shard
    /// (an ending session lets its locks go one at a time, the shard's lock perhaps before the key), and
    /// gives up, to leave the shard, if it never lets go. Keys of other shards, and locks of sessions that
    /// are not nodes' lock sessions, do not hold it back.
    @Test func takingAShardWaitsForTheOldOwnersKeyToGo() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let old = try PostgresConnection(database + " application_name='effectloop node old'")
        defer { old.close() }
        let other = try PostgresConnection(database + " application_name='another program'")
        defer { other.close() }
        let taker = try PostgresConnection(database + " application_name='effectloop node new'")
        defer { taker.close() }
        let (shard, token): (Int64, Int64) = (7, 5 << 16)
        _ = try old.execute("SELECT pg_advisory_lock($1::bigint)", [.int(token + 8)])
        _ = try other.execute("SELECT pg_advisory_lock($1::bigint)", [.int((9 << 16) + shard)])
        try ShardKeys.awaitOthersGone(of: Int(shard), attempts: 1, on: taker)

        _ = try old.execute("SELECT pg_advisory_lock($1::bigint)", [.int(token + shard)])
        #expect(throws: PostgresError.self) { try ShardKeys.awaitOthersGone(of: Int(shard), attempts: 3, on: taker) }
        _ = try old.execute("SELECT pg_advisory_unlock($1::bigint)", [.int(token + shard)])
        try ShardKeys.awaitOthersGone(of: Int(shard), attempts: 1, on: taker)
    }

    /// A row inserted the way `Docs/Cluster.md` shows, with a name PostgreSQL cannot index: once it
    /// stopped every node in turn; now it goes to the dead letters and the node goes on.
    @Test func aRowWithANameTheStoreCannotIndexIsDeadLetteredAndTheNodeGoesOn() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        let payload = String(decoding: try JSONCodec<Counter.Event>().encode(.add(1)), as: UTF8.self)
        _ = try await TemporaryPostgres.psql(
            database,
            sql:
                "INSERT INTO effectloop.inbox (stream, payload) VALUES (repeat('x', 3000), convert_to('\(payload)', 'UTF8'))"
        )
        try await Self.send(10, over: 2, to: database)
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        let reason = try await TemporaryPostgres.psql(database, sql: "SELECT reason FROM effectloop.inbox_dead")
        #expect(reason.contains("a stream name of 3000 bytes, past the limit of 1024"), "\(reason)")
        #expect((node.state(of: "entity-0") ?? 0) + (node.state(of: "entity-1") ?? 0) == 10)
        // The library refuses such a name at the door too.
        let inbox = try await PostgresInbox(connecting: database)
        await #expect(throws: EventStoreError.self) {
            try await inbox.send(Array(payload.utf8), to: String(repeating: "x", count: 3_000))
        }
        await inbox.close()
        node.stop()
        // It stopped because it was asked to, not on its own: run() returns without an error.
        _ = try await running.value
    }

    /// A row a program inserts itself under a decomposed name ("e" and a combining accent) lands in
    /// the shard of those bytes; the library appends under the composed name, whose shard may be
    /// another node's. The node that finds the row moves it to the composed name's shard instead of
    /// taking it (appending there would be fenced, and cost it its session): one stream, no
    /// interruption, whichever spelling each row came under.
    @Test func aRowInsertedUnderADecomposedNameGoesToItsComposedNamesShard() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let connection = try PostgresConnection(database)
        defer { connection.close() }
        func shard(_ name: String) throws -> Int {
            Int(try connection.execute("SELECT effectloop.shard_of($1, 64)::bigint", [.text(name)]).int(0, 0))
        }
        // A name whose decomposed bytes are node a's shard and whose composed name is node b's.
        let ofA = ShardMap(shards: 64).shards(of: "node-a", among: ["node-a", "node-b"])
        var chosen: Int?
        for number in 0..<1_000 {
            let decomposed = try shard("cafe\u{301}-\(number)")
            let composed = try shard("caf\u{E9}-\(number)")
            if ofA.contains(decomposed) && !ofA.contains(composed) {
                chosen = number
                break
            }
        }
        let number = try #require(chosen)
        let a = try await Counter.node(database, "node-a")
        let b = try await Counter.node(database, "node-b")
        let runningA = Task { try await a.run() }
        let runningB = Task { try await b.run() }
        try await Self.eventually("both nodes to own their shards") {
            a.ownedShards == ofA && a.ownedShards.count + b.ownedShards.count == 64
        }
        let payload = try JSONCodec<Counter.Event>().encode(.add(1))
        try connection.execute(
            "INSERT INTO effectloop.inbox (stream, payload) VALUES ($1, $2)",
            [.text("cafe\u{301}-\(number)"), .bytes(payload)]
        )
        try await inbox.send(payload, to: "caf\u{E9}-\(number)")
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        let streams = try await Self.query(
            database,
            "SELECT encode(convert_to(string_agg(DISTINCT stream, ','), 'UTF8'), 'hex') || ':' || count(*) FROM effectloop.events"
        )
        #expect(streams == "636166c3a92d\(Array("\(number)".utf8).map { String($0, radix: 16) }.joined()):2")
        #expect(b.state(of: "caf\u{E9}-\(number)") == 2)
        #expect(a.interruptions == 0 && b.interruptions == 0)
        await inbox.close()
        a.stop()
        b.stop()
        _ = try await runningA.value
        _ = try await runningB.value
    }

    /// On one node, an entity's rows keep their id order when the first came under a decomposed name:
    /// the later row, read with it, waits until the moved row is read again beside it.
    @Test func aMovedRowKeepsItsPlaceBeforeItsEntitysLaterRows() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        try await Self.eventually("the node to own every shard") { node.ownedShards.count == 64 }
        let codec = JSONCodec<Counter.Event>()
        let (first, second) = (
            String(decoding: try codec.encode(.add(1)), as: UTF8.self),
            String(decoding: try codec.encode(.add(2)), as: UTF8.self)
        )
        // One statement, one transaction: the node reads both rows at once.
        _ = try await TemporaryPostgres.psql(
            database,
            sql: """
                INSERT INTO effectloop.inbox (stream, payload)
                VALUES (U&'cafe\\0301', convert_to('\(first)', 'UTF8')), (U&'caf\\00E9', convert_to('\(second)', 'UTF8'))
                """
        )
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        let order = try await Self.query(
            database,
            "SELECT string_agg(encode(convert_to(stream, 'UTF8'), 'hex') || '@' || version || '<' || inbox_id, ',' ORDER BY version) FROM effectloop.events"
        )
        let ids = try await Self.query(
            database,
            "SELECT string_agg(inbox_id::text, ',' ORDER BY inbox_id) FROM effectloop.events"
        )
        let (low, high) = try #require(
            { () -> (String, String)? in
                let parts = ids.split(separator: ",").map(String.init)
                return parts.count == 2 ? (parts[0], parts[1]) : nil
            }()
        )
        #expect(order == "636166c3a9@1<\(low),636166c3a9@2<\(high)")
        #expect(node.state(of: "caf\u{E9}") == 3)
        node.stop()
        _ = try await running.value
    }

    /// A notification of new rows wakes the node between heartbeats, and it reads them at once: a steady
    /// stream of rows, each notified, must not keep its heartbeats (its lease, its membership) from
    /// coming, and every row is processed once. (On this machine the node keeps up with eight senders,
    /// so a wait without notifications comes now and then even without the read's check of the
    /// heartbeat's time: the test guards the heartbeat under load, not that check alone.)
    @Test func aNodeUnderASteadyStreamOfRowsKeepsItsHeartbeat() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "busy")
        let running = Task { try await node.run() }
        try await Self.eventually("the node to own every shard") { node.ownedShards.count == 64 }
        let stop = Locked(false)
        // Eight senders at once: the node finds a notification waiting at each turn.
        let sending = Task {
            try await withThrowingTaskGroup(of: Int.self) { senders in
                for sender in 0..<8 {
                    senders.addTask {
                        let inbox = try await PostgresInbox(connecting: database)
                        let codec = JSONCodec<Counter.Event>()
                        var sent = 0
                        while !stop.withLock({ $0 }) {
                            try await inbox.send(try codec.encode(.add(1)), to: "entity-\(sender)-\(sent % 10)")
                            sent += 1
                        }
                        await inbox.close()
                        return sent
                    }
                }
                return try await senders.reduce(0, +)
            }
        }
        func events() async throws -> Int {
            Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0
        }
        func beat() async throws -> String {
            try await Self.query(database, "SELECT heartbeat_at::text FROM effectloop.nodes WHERE node = 'busy'")
        }
        try await Self.eventually("the rows to flow") { try await events() >= 50 }
        let before = try await events()
        var (last, beats) = (try await beat(), 0)
        try await Self.eventually("five heartbeats while rows keep coming") {
            let now = try await beat()
            if now != last { (last, beats) = (now, beats + 1) }
            return beats >= 5
        }
        let during = try await events() - before
        stop.withLock { $0 = true }
        let sent = try await sending.value
        #expect(beats >= 5)
        #expect(during > 0, "rows were processed between the heartbeats")
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        #expect(try await events() == sent)
        node.stop()
        _ = try await running.value
    }

    /// An event from the inbox is recorded as the bytes it came in, in the sender's spelling of the
    /// codec's format, not decoded and encoded again.
    @Test func anInboxRowsEventIsRecordedAsItsBytesCame() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        try await Self.eventually("the node to own every shard") { node.ownedShards.count == 64 }
        let encoded = String(decoding: try JSONCodec<Counter.Event>().encode(.add(5)), as: UTF8.self)
        // The same event as a person might type it: JSON with spaces the encoder never writes.
        let spelled = String(encoded.flatMap { $0 == ":" ? Array(" : ") : $0 == "{" ? Array("{ ") : [$0] })
        #expect(spelled != encoded)
        _ = try await TemporaryPostgres.psql(
            database,
            sql: "INSERT INTO effectloop.inbox (stream, payload) VALUES ('spelled', convert_to('\(spelled)', 'UTF8'))"
        )
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        #expect(node.state(of: "spelled") == 5)
        let recorded = try await Self.query(
            database,
            """
            SELECT count(*) FROM effectloop.events
            WHERE stream = 'spelled' AND position(convert_to('\(spelled)', 'UTF8') in payload) > 0
            """
        )
        #expect(recorded == "1")
        node.stop()
        _ = try await running.value
    }

    @Test func aRowThatDoesNotDecodeGoesToTheDeadLettersAndTheRestIsProcessed() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        let inbox = try await PostgresInbox(connecting: database)
        try await inbox.send(Array("not json".utf8), to: "entity-1")
        await inbox.close()
        try await Self.send(10, over: 2, to: database)
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        #expect(try await Self.query(database, "SELECT stream FROM effectloop.inbox_dead") == "entity-1")
        #expect(node.counts.dead == 1)
        #expect((node.state(of: "entity-0") ?? 0) + (node.state(of: "entity-1") ?? 0) == 10)
        node.stop()
        _ = try await running.value
    }

    /// A node whose every event starts an effect that runs until it is cancelled.
    static func hanging(
        _ database: String,
        started: AsyncStream<Void>.Continuation
    ) async throws -> ClusterNode<Int, Counter.Event, Hang> {
        try await ClusterNode(
            connecting: database,
            name: "hanging",
            program: DurableProgram(
                initial: 0,
                update: Update { total, event in
                    switch event {
                    case .add(let amount): total += amount
                    }
                    return [.hang]
                }
            ),
            effects: EffectRouter<Hang, Counter.Event>()
                .route(
                    { $0 },
                    to: ClosureEffectHandler { _, _ in
                        started.yield()
                        try await Task.sleep(for: .seconds(3_600))
                    }
                ),
            events: JSONCodec<Counter.Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(heartbeat: .milliseconds(100), membershipTimeout: .seconds(1))
        )
    }

    enum Hang: Sendable { case hang }

    @Test func aCancelledNodeLeavesAtOnceAndCancelsItsEntitiesEffects() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let (started, begun) = AsyncStream.makeStream(of: Void.self)
        let node = try await Self.hanging(database, started: begun)
        // Through the protocol a service framework uses.
        let part: any Runnable = node
        let running = Task { try await part.run() }
        try await Self.send(1, over: 1, to: database)
        var starts = started.makeAsyncIterator()
        _ = await starts.next()
        running.cancel()
        // Returns without waiting out the effect (an hour) or a grace period (30 s by default).
        let report = try await running.value
        #expect(report.ending == .cancelled)
        #expect(report.eventsProcessed == 1)
        #expect(report.effectsStarted == 1)
        #expect(report.effectsCompleted == 0)
        #expect(node.ownedShards.isEmpty)
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.nodes") == "0")
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.events") == "1")
    }

    /// A node waiting for the inbox's notifications (its heartbeat an hour away) hears a stop, and a
    /// cancellation, at once: the wait is woken, not run out. (`eventually`'s limit, a minute, is a hang
    /// guard, not a timing: without the wake-up the node leaves an hour later.)
    @Test(arguments: [false, true])
    func aNodeWaitingForItsHeartbeatLeavesWhenStopped(cancelling: Bool) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await ClusterNode(
            connecting: database,
            name: "patient",
            program: Counter.program,
            effects: EffectRouter(),
            events: JSONCodec<Counter.Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(heartbeat: .seconds(3_600), membershipTimeout: .seconds(7_200))
        )
        let running = Task { try await node.run() }
        let left = Locked(false)
        let watcher = Task {
            _ = try? await running.value
            left.withLock { $0 = true }
        }
        try await Self.eventually("the node to hold every shard") { node.ownedShards.count == 64 }
        if cancelling { running.cancel() } else { node.stop() }
        try await Self.eventually("the node to leave") { left.withLock { $0 } }
        guard left.withLock({ $0 }) else { return }
        await watcher.value
        #expect(node.ownedShards.isEmpty)
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.nodes") == "0")
    }

    @Test func aGracefulStopGivesEffectsItsGracePeriodAndReportsTheDeadline() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let (started, begun) = AsyncStream.makeStream(of: Void.self)
        let node = try await Self.hanging(database, started: begun)
        let running = Task { try await node.run() }
        try await Self.send(1, over: 1, to: database)
        var starts = started.makeAsyncIterator()
        _ = await starts.next()
        node.stop(gracePeriod: .milliseconds(50))
        let report = try await running.value
        #expect(report.ending == .deadlineExceeded)
        #expect(report.effectsAbandoned + report.effectsCancelled == 1)
        #expect(try await Self.query(database, "SELECT count(*) FROM effectloop.nodes") == "0")
    }

    @Test func aNodeWithNothingInFlightDrainsOnAGracefulStop() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Counter.node(database, "solo")
        let running = Task { try await node.run() }
        try await Self.send(10, over: 2, to: database)
        try await Self.eventually("the inbox to drain") {
            try await Self.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        node.stop(gracePeriod: .seconds(60))
        let report = try await running.value
        #expect(report.ending == .drained)
        #expect(report.eventsProcessed == 10)
    }
}
