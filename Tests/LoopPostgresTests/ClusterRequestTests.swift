import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport
import Testing

/// Nodes of entities that answer requests with their new total.
enum Totals {
    typealias Event = ClusterTotals.Event

    static func node(
        _ database: String,
        _ name: String,
        answersKept: Duration = .seconds(3_600)
    ) async throws -> ClusterNode<Int, Event, ClusterTotals.Effect> {
        try await ClusterNode(
            connecting: database,
            name: name,
            program: ClusterTotals.program,
            effects: EffectRouter(),
            events: JSONCodec<Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(
                heartbeat: .milliseconds(100),
                membershipTimeout: .seconds(1),
                answersKept: answersKept
            )
        )
    }

    static func client(_ database: String) async throws -> ClusterClient<Event> {
        try await ClusterClient(connecting: database, events: JSONCodec<Event>())
    }
}

@Suite("Requests across the cluster", .serialized)
struct ClusterRequestTests {
    typealias Tests = ClusterNodeTests

    /// A node and a client of their own, in one database; the node is stopped after `body`.
    static func withNode(
        answersKept: Duration = .seconds(3_600),
        _ body: (String, ClusterNode<Int, Totals.Event, ClusterTotals.Effect>, ClusterClient<Totals.Event>)
            async throws -> Void
    ) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let node = try await Totals.node(database, "solo", answersKept: answersKept)
        let running = Task { try await node.run() }
        let client = try await Totals.client(database)
        do {
            try await Tests.eventually("the node to own every shard") { node.ownedShards.count == 64 }
            try await body(database, node, client)
        } catch {
            await client.close()
            node.stop()
            _ = try? await running.value
            throw error
        }
        await client.close()
        node.stop()
        _ = try await running.value
    }

    /// The answer comes back to a client that only shares the database with the node, once its event
    /// is recorded: the event, its answer and the inbox row's delete are one transaction.
    @Test func aClientAsksAnEntityAndGetsTheAnswerItsEventRecorded() async throws {
        try await Self.withNode { database, node, client in
            let first = try await client.request(to: "account-1", key: "k1", timeout: .seconds(30)) {
                .add(5, replyTo: $0)
            }
            let second = try await client.request(to: "account-1", key: "k2", timeout: .seconds(30)) {
                .add(7, replyTo: $0)
            }
            #expect(first == 5)
            #expect(second == 12)
            #expect(
                try await Tests.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'account-1'")
                    == "2"
            )
            #expect(try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0")
            #expect(
                try await Tests.query(database, "SELECT count(*) FROM effectloop.replies WHERE answered_at IS NOT NULL")
                    == "2"
            )
            // Without a key, the client makes one: each request is applied.
            #expect(try await client.request(to: "account-1", timeout: .seconds(30)) { .add(1, replyTo: $0) } == 13)
        }
    }

    /// A repeat of a key gets the first answer and applies nothing: from the `replies` table while it
    /// keeps the answer, and from the entity's key window once the table has let it go.
    @Test func aRepeatOfAKeyIsAnsweredFromTheRecordAndAppliedOnce() async throws {
        try await Self.withNode { database, node, client in
            let first = try await client.request(to: "account-2", key: "once", timeout: .seconds(30)) {
                .add(5, replyTo: $0)
            }
            let again = try await client.request(to: "account-2", key: "once", timeout: .seconds(30)) {
                .add(5, replyTo: $0)
            }
            #expect(first == 5 && again == 5)
            // The table let it go (as after `answersKept`): the entity answers from its record, and the
            // repeat's inbox row, which no append consumes, is deleted.
            _ = try await Tests.query(database, "DELETE FROM effectloop.replies")
            let late = try await client.request(to: "account-2", key: "once", timeout: .seconds(30)) {
                .add(5, replyTo: $0)
            }
            #expect(late == 5)
            #expect(
                try await Tests.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'account-2'")
                    == "1"
            )
            try await Tests.eventually("the repeat's row to be deleted") {
                try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
            }
            #expect(node.state(of: "account-2") == 5)
        }
    }

    /// Two spellings of one entity's name, and of one key ("é" as one scalar or as "e" and an accent):
    /// one entity, one stream, and the second request a repeat of the first, answered and not applied.
    @Test func twoSpellingsOfANameAndOfAKeyAreOneEntityAndOneRequest() async throws {
        try await Self.withNode { database, node, client in
            let first = try await client.request(to: "caf\u{E9}", key: "r\u{E9}sum\u{E9}", timeout: .seconds(30)) {
                .add(5, replyTo: $0)
            }
            let again = try await client.request(to: "cafe\u{301}", key: "re\u{301}sume\u{301}", timeout: .seconds(30))
            {
                .add(5, replyTo: $0)
            }
            let other = try await client.request(to: "cafe\u{301}", key: "other", timeout: .seconds(30)) {
                .add(2, replyTo: $0)
            }
            #expect(first == 5 && again == 5 && other == 7)
            #expect(
                try await Tests.query(
                    database,
                    // The bytes: comparing the strings would hold for either spelling.
                    "SELECT encode(convert_to(string_agg(DISTINCT stream, ','), 'UTF8'), 'hex') || ':' || count(*) FROM effectloop.events"
                )
                    == "636166c3a9:2"
            )
            #expect(node.state(of: "cafe\u{301}") == 7)
        }
    }

    /// Eight callers repeating one key at once (in one client and in two): applied once, one answer.
    @Test func concurrentRepeatsOfAKeyApplyOnceAndGetOneAnswer() async throws {
        try await Self.withNode { database, node, client in
            let other = try await Totals.client(database)
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<8 {
                    let asking = index % 2 == 0 ? client : other
                    group.addTask {
                        try await asking.request(to: "account-3", key: "same", timeout: .seconds(30)) {
                            .add(3, replyTo: $0)
                        }
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            await other.close()
            #expect(answers == Array(repeating: 3, count: 8))
            #expect(
                try await Tests.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'account-3'")
                    == "1"
            )
            try await Tests.eventually("every repeat's row to be deleted") {
                try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
            }
        }
    }

    /// A key recorded with another event is refused, and the refused row leaves the inbox.
    @Test func aKeyRepeatedWithAnotherEventIsRefused() async throws {
        try await Self.withNode { database, node, client in
            _ = try await client.request(to: "account-4", key: "k", timeout: .seconds(30)) { .add(1, replyTo: $0) }
            // Refused by the entity: the `replies` row is another (the event differs, so its address does).
            await #expect(throws: RequestError.keyReused("k")) {
                try await client.request(to: "account-4", key: "k", timeout: .seconds(30)) { .add(2, replyTo: $0) }
            }
            #expect(node.state(of: "account-4") == 1)
            try await Tests.eventually("the refused row to be deleted") {
                try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
            }
        }
    }

    /// A request whose event the nodes cannot decode goes to the dead letters, and its caller hears why
    /// rather than waiting for its timeout.
    @Test func aRequestTheNodeCannotDecodeIsDeadLetteredAndItsCallerHearsWhy() async throws {
        try await Self.withNode { database, node, client in
            let stranger = try await ClusterClient(connecting: database, events: JSONCodec<Stranger>())
            var outcome: Result<Int, RequestError>
            do throws(RequestError) {
                outcome = .success(
                    try await stranger.request(
                        to: "account-5",
                        key: "k",
                        timeout: .seconds(30),
                        answers: BinaryCodec<Int>()
                    ) {
                        Stranger(name: "not an event", replyTo: $0)
                    }
                )
            } catch {
                outcome = .failure(error)
            }
            guard case .failure(.invalid(let reason)) = outcome, reason.contains("cannot be processed") else {
                Issue.record("ended with \(outcome)")
                await stranger.close()
                return
            }
            await stranger.close()
            #expect(
                try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox_dead WHERE key = 'k'") == "1"
            )
            // The node goes on.
            #expect(
                try await client.request(to: "account-5", key: "k2", timeout: .seconds(30)) { .add(2, replyTo: $0) }
                    == 2
            )
        }
    }

    /// With no node running, a request times out; its row waits in the inbox, and once a node runs, a
    /// repeat of the key gets the answer of the one event applied.
    @Test func aRequestThatTimedOutIsAnsweredOnceWhenRepeated() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let client = try await Totals.client(database)
        await #expect(throws: RequestError.timedOut(after: .milliseconds(300))) {
            try await client.request(to: "account-6", key: "late", timeout: .milliseconds(300)) { .add(4, replyTo: $0) }
        }
        let node = try await Totals.node(database, "solo")
        let running = Task { try await node.run() }
        let answer = try await client.request(to: "account-6", key: "late", timeout: .seconds(30)) {
            .add(4, replyTo: $0)
        }
        #expect(answer == 4)
        try await Tests.eventually("the inbox to drain") {
            try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
        }
        #expect(
            try await Tests.query(database, "SELECT count(*) FROM effectloop.events WHERE stream = 'account-6'") == "1"
        )
        await client.close()
        node.stop()
        _ = try await running.value
    }

    /// The client's connections are cut: it connects again (its writer tries a statement a broken
    /// connection failed once more, on a new one), listens again, and reads the answers it may have
    /// missed; requests go on being answered.
    @Test func aClientWhoseListeningConnectionDiesStillGetsItsAnswers() async throws {
        try await Self.withNode { database, node, client in
            #expect(
                try await client.request(to: "account-7", key: "a", timeout: .seconds(30)) { .add(1, replyTo: $0) } == 1
            )
            // Every client connection (this client's and the node's own): the writer connects again too.
            let cut = try await Tests.query(
                database,
                """
                SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
                WHERE application_name = 'effectloop client' AND datname = current_database()) t
                """
            )
            #expect((Int(cut) ?? 0) >= 2)
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        try await client.request(to: "account-7-\(index)", key: "b", timeout: .seconds(30)) {
                            .add(2, replyTo: $0)
                        }
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(answers == Array(repeating: 2, count: 20))
        }
    }

    /// A schema with a long name (57 bytes, the longest that leaves room for `<schema>_inbox`; 63, the
    /// longest PostgreSQL allows, whose inbox notifies a channel named by the name's hash): the client's
    /// channel does not grow with it, and the node is woken by the inbox's notification (its heartbeat
    /// is longer than the request's timeout).
    @Test(arguments: [57, 63])
    func aSchemaWithALongNameStillAnswers(length: Int) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let schema = "s" + String(repeating: "x", count: length - 1)
        #expect(try await Self.askWithoutHeartbeats(database, schema: schema, adding: 6) == 6)
    }

    /// A store with a 63-byte schema name installed by an earlier release, whose inbox notified a channel
    /// PostgreSQL refuses (so every insert failed), is set right when a node opens it, once: opened
    /// again, the function is left alone (only its owner may replace it). The node's heartbeat is longer
    /// than the request's timeout, so the answer proves the trigger notifies the channel the node hears.
    @Test func aLongNamedInboxInstalledByAnEarlierReleaseIsSetRight() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let schema = "s" + String(repeating: "y", count: 62)
        await (try await PostgresEventStore(connecting: database, schema: schema)).close()
        // The earlier release's notification.
        _ = try await TemporaryPostgres.psql(
            database,
            sql: """
                CREATE OR REPLACE FUNCTION \(schema).inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_notify('\(schema)_inbox', ''); RETURN NULL; END $$
                """
        )
        let broken = try? await TemporaryPostgres.psql(
            database,
            sql: "INSERT INTO \(schema).inbox (stream, payload) VALUES ('a', '\\x00')"
        )
        #expect(broken == nil, "the earlier release's inbox refuses inserts")
        #expect(try await Self.askWithoutHeartbeats(database, schema: schema, adding: 4) == 4)
        let version = "SELECT xmin FROM pg_proc WHERE oid = to_regprocedure('\(schema).inbox_notify()')"
        let repaired = try await Tests.query(database, version)
        await (try await PostgresEventStore(connecting: database, schema: schema)).close()
        #expect(try await Tests.query(database, version) == repaired)
    }

    /// Runs one node in `schema` whose heartbeat (a minute) is longer than the request's timeout, asks it
    /// through a client to add `amount` to an entity, and stops it: the answer, which only the inbox's
    /// notification can have brought in time.
    static func askWithoutHeartbeats(_ database: String, schema: String, adding amount: Int) async throws -> Int {
        let node = try await ClusterNode(
            connecting: database,
            name: "solo",
            program: ClusterTotals.program,
            effects: EffectRouter(),
            events: JSONCodec<Totals.Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(schema: schema, heartbeat: .seconds(60), membershipTimeout: .seconds(120))
        )
        let running = Task { try await node.run() }
        try await Tests.eventually("the node to hold every shard") { node.ownedShards.count == 64 }
        let client = try await ClusterClient(connecting: database, events: JSONCodec<Totals.Event>(), schema: schema)
        let answer = try await client.request(to: "account-1", key: "k", timeout: .seconds(30)) {
            .add(amount, replyTo: $0)
        }
        await client.close()
        node.stop()
        _ = try await running.value
        return answer
    }

    /// The channel of a schema named too long for `<schema>_inbox` is the same in every process and
    /// release (nodes of different releases must hear one trigger): pinned.
    @Test func theInboxChannelOfALongSchemaNameIsPinned() {
        #expect(
            PostgresSchema.inboxChannel("s" + String(repeating: "y", count: 62)) == "effectloop_inbox_ea3535d70e1c1eac"
        )
        #expect(
            PostgresSchema.inboxChannel("s" + String(repeating: "x", count: 62)) == "effectloop_inbox_171b5894ba763562"
        )
        #expect(PostgresSchema.inboxChannel("effectloop") == "effectloop_inbox")
        #expect(
            PostgresSchema.inboxChannel("s" + String(repeating: "x", count: 56)) == "s"
                + String(repeating: "x", count: 56) + "_inbox"
        )
    }

    /// A node asks an entity that another node owns: the answer comes back through the database.
    @Test func aNodeAsksAnEntityAnotherNodeOwns() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let (a, b) = (try await Totals.node(database, "a"), try await Totals.node(database, "b"))
        let runningA = Task { try await a.run() }
        let runningB = Task { try await b.run() }
        try await Tests.eventually("the shards to be split") {
            a.ownedShards.count + b.ownedShards.count == 64 && !a.ownedShards.isEmpty && !b.ownedShards.isEmpty
        }
        // An entity in one of b's shards, found by the database's own shard function.
        var entity = ""
        for index in 0..<1_000 {
            let shard = try await Tests.query(database, "SELECT effectloop.shard_of('account-\(index)', 64)")
            if let shard = Int(shard), b.ownedShards.contains(shard) {
                entity = "account-\(index)"
                break
            }
        }
        let answer = try await a.request(to: entity, key: "from-a", timeout: .seconds(30)) { .add(9, replyTo: $0) }
        #expect(answer == 9)
        #expect(b.state(of: entity) == 9)
        #expect(a.state(of: entity) == nil)
        // Any node reads what is recorded, the owner's entity included, and the read starts nothing.
        #expect(try await a.recordedState(of: entity) == 9)
        #expect(try await b.recordedState(of: entity) == 9)
        #expect(a.state(of: entity) == nil)
        #expect(try await a.recordedState(of: "nobody") == 0)
        a.stop()
        b.stop()
        _ = try await runningA.value
        _ = try await runningB.value
        // A node that stopped has no session with the database: its read is an error, not a state.
        do {
            let state = try await a.recordedState(of: entity)
            Issue.record("a stopped node read \(state)")
        } catch {
            guard case .storeFailed = error else {
                Issue.record("unexpected \(error)")
                return
            }
        }
    }

    /// Hostile keys and names are refused before anything is sent.
    @Test func badKeysAndNamesAreRefusedBeforeAnythingIsSent() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let client = try await Totals.client(database)
        await #expect(throws: RequestError.self) {
            try await client.request(to: "account-8", key: "", timeout: .seconds(1)) { .add(1, replyTo: $0) }
        }
        await #expect(throws: RequestError.self) {
            try await client.request(to: "account-8", key: String(repeating: "k", count: 10_000), timeout: .seconds(1))
            {
                .add(1, replyTo: $0)
            }
        }
        await #expect(throws: RequestError.self) {
            try await client.request(to: "bad\u{0}name", key: "k", timeout: .seconds(1)) { .add(1, replyTo: $0) }
        }
        // PostgreSQL's text holds no NUL: sent, it would fail every request sent in the same statement.
        await #expect(throws: RequestError.invalid("a key with a NUL character")) {
            try await client.request(to: "account-8", key: "a\u{0}b", timeout: .seconds(1)) { .add(1, replyTo: $0) }
        }
        #expect(try await Tests.query(database, "SELECT count(*) FROM effectloop.inbox") == "0")
        await client.close()
        // A closed client refuses.
        await #expect(throws: RequestError.rejected(.stopped)) {
            try await client.request(to: "account-8", key: "k", timeout: .seconds(1)) { .add(1, replyTo: $0) }
        }
    }
}

/// An event no cluster node knows.
struct Stranger: Codable, Sendable {
    var name: String
    var replyTo: ReplyTo<Int>
}
