import Foundation
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport
import Testing

@Suite("PostgresInbox")
struct PostgresInboxTests {
    @Test func rowsFromSwiftAndFromPsqlLandInTheSameShardForTheSameStream() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let first = try await inbox.send(Array("one".utf8), to: "order-17")
        let second = try await inbox.send(Array("two".utf8), to: "order-17")
        #expect(second > first)
        try await TemporaryPostgres.psql(
            database,
            sql: "INSERT INTO effectloop.inbox (stream, payload) VALUES ('order-17', convert_to('three', 'UTF8'))"
        )
        #expect(try await inbox.waiting() == 3)
        let shards = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT DISTINCT shard FROM effectloop.inbox WHERE stream = 'order-17'"
        )
        let shard = Int(shards.filter { !$0.isWhitespace })
        #expect(shard != nil && (0..<64).contains(shard ?? -1), "shards: \(shards)")
        let computed = try await TemporaryPostgres.psql(database, sql: "SELECT effectloop.shard_of('order-17', 64)")
        #expect(Int(computed.filter { !$0.isWhitespace }) == shard)
        await inbox.close()
    }

    /// A store written before names were composed: upgrading composes the names stored in another
    /// spelling (events, snapshots, the marks of work under way, the inbox, with its rows' shards, the
    /// dead letters and the replies), and refuses, naming them, streams that are one name in two
    /// spellings (they cannot be made one), leaving the schema as it was.
    @Test func upgradingComposesStoredNamesAndRefusesTwoStreamsOfOneName() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database, schema: "old")
        _ = try await store.append([[1]], to: "plain", expecting: 0)
        await store.close()
        // As an earlier release left it: a decomposed name's rows, then the schema at version 6.
        try await TemporaryPostgres.psql(
            database,
            sql: """
                INSERT INTO old.events (stream, version, payload) VALUES (U&'cafe\\0301', 1, '\\x01'), (U&'cafe\\0301', 2, '\\x02');
                INSERT INTO old.snapshots (stream, version, payload) VALUES (U&'cafe\\0301', 2, '\\x02');
                INSERT INTO old.awake (stream, shard) VALUES (U&'cafe\\0301', old.shard_of(U&'cafe\\0301', 64));
                INSERT INTO old.events (stream, version, payload) VALUES (U&'x\\+016D67\\+016D67', 1, '\\x05');
                INSERT INTO old.inbox (stream, payload) VALUES (U&'cafe\\0301', '\\x06');
                INSERT INTO old.inbox_dead (id, stream, payload, reason) VALUES (1, U&'cafe\\0301', '\\x07', 'test');
                INSERT INTO old.replies (stream, reply, channel) VALUES (U&'cafe\\0301', 1, 'test');
                UPDATE old.effectloop_meta SET value = 6 WHERE key = 'schema_version';
                """
        )
        let upgraded = try await PostgresEventStore(connecting: database, schema: "old")
        #expect(try await upgraded.read("caf\u{E9}", after: 0, limit: 10).map(\.payload) == [[1], [2]])
        #expect(try await upgraded.latestSnapshot(of: "caf\u{E9}")?.version == 2)
        // Two Kirat Rai vowel signs compose to a third since Unicode 16, which this server's
        // `normalize` may not know: composed as Swift composes.
        #expect(try await upgraded.read("x\u{16D68}", after: 0, limit: 10).map(\.payload) == [[5]])
        #expect(try await upgraded.streams().count == 3)
        await upgraded.close()
        let marks = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT encode(convert_to(stream, 'UTF8'), 'hex') || ' ' || shard FROM old.awake"
        )
        let shard = try await TemporaryPostgres.psql(database, sql: "SELECT old.shard_of(U&'caf\\00E9', 64)")
        #expect(marks.filter { $0 != "\n" } == "636166c3a9 " + shard.filter { !$0.isWhitespace })
        // The inbox row in the composed name's shard, and the dead letter and the reply under its name.
        let others = try await TemporaryPostgres.psql(
            database,
            sql: """
                SELECT string_agg(encode(convert_to(stream, 'UTF8'), 'hex'), ',') FROM (
                    SELECT stream FROM old.inbox WHERE shard = old.shard_of(U&'caf\\00E9', 64)
                    UNION ALL SELECT stream FROM old.inbox_dead UNION ALL SELECT stream FROM old.replies
                ) s
                """
        )
        #expect(others.filter { !$0.isWhitespace } == "636166c3a9,636166c3a9,636166c3a9")

        // Two streams of one name: the upgrade refuses and changes nothing.
        try await TemporaryPostgres.psql(
            database,
            sql: """
                INSERT INTO old.events (stream, version, payload) VALUES (U&'A\\030A', 1, '\\x03'), (U&'\\00C5', 1, '\\x04');
                UPDATE old.effectloop_meta SET value = 6 WHERE key = 'schema_version';
                """
        )
        do {
            _ = try await PostgresEventStore(connecting: database, schema: "old")
            Issue.record("a schema with two streams of one name was upgraded")
        } catch let error as EventStoreError {
            #expect(
                "\(error)".contains("several spellings of one name: '\u{C5}' (stored as 41 cc 8a and c3 85)"),
                "\(error)"
            )
        }
        let version = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT value FROM old.effectloop_meta WHERE key = 'schema_version'"
        )
        #expect(version.filter { !$0.isWhitespace } == "6")
    }

    /// A database whose encoding is not UTF-8 (`SQL_ASCII`, which keeps bytes as they come): upgrading
    /// composes the names stored by a release before all the same, so their events stay readable and a
    /// stale append conflicts instead of starting a second history.
    @Test func upgradingComposesStoredNamesInADatabaseThatIsNotUTF8() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase(encoding: "SQL_ASCII")
        let store = try await PostgresEventStore(connecting: database, schema: "old")
        await store.close()
        // As a release before wrote them: the name's bytes as it was given (e, then the accent's).
        try await TemporaryPostgres.psql(
            database,
            sql: """
                INSERT INTO old.events (stream, version, payload)
                VALUES (convert_from('\\x63616665cc81', 'SQL_ASCII'), 1, '\\x01'), (convert_from('\\x63616665cc81', 'SQL_ASCII'), 2, '\\x02');
                UPDATE old.effectloop_meta SET value = 6 WHERE key = 'schema_version';
                """
        )
        let upgraded = try await PostgresEventStore(connecting: database, schema: "old")
        #expect(try await upgraded.read("cafe\u{301}", after: 0, limit: 10).map(\.payload) == [[1], [2]])
        do {
            _ = try await upgraded.append([[9]], to: "cafe\u{301}", expecting: 0)
            Issue.record("a second history of the stream was started")
        } catch let error as EventStoreError {
            #expect(error.kind == .versionConflict(expected: 0, actual: 2))
        }
        await upgraded.close()
        let stored = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT DISTINCT encode(convert_to(stream, 'SQL_ASCII'), 'hex') FROM old.events"
        )
        #expect(stored.filter { !$0.isWhitespace } == "636166c3a9")
    }

    @Test func streamsSpreadOverTheShards() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let used = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT count(DISTINCT effectloop.shard_of('entity-' || n, 64)) FROM generate_series(1, 10000) n"
        )
        #expect(Int(used.filter { !$0.isWhitespace }) == 64)
        await inbox.close()
    }

    @Test func theStoreAndTheInboxShareOneSchemaAtItsLatestVersion() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database)
        let inbox = try await PostgresInbox(connecting: database)
        let version = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT value FROM effectloop.effectloop_meta WHERE key = 'schema_version'"
        )
        #expect(version.filter { !$0.isWhitespace } == "8")
        #expect(try await store.append([[1]], to: "s", expecting: 0) == 1)
        await inbox.close()
        await store.close()
    }
}

@Suite("PostgresEventStore consuming the inbox")
struct InboxConsumptionTests {
    @Test func anEventTakesItsInboxRowAndARepeatOfItConflicts() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let id = try await inbox.send(Array("add".utf8), to: "s")
        let store = try await PostgresEventStore(
            connecting: database,
            schema: "effectloop",
            inboxRowOf: { InboxedCodec<String>.inboxRow(of: $0) }
        )
        let codec = InboxedCodec(JSONCodec<String>())
        let event = try codec.encode(Inboxed(inboxRow: id, event: "add"))
        #expect(try await store.append([event], to: "s", expecting: 0) == 1)
        #expect(try await inbox.waiting() == 0)
        // The same row again (a node that processed it late): a conflict, not a second transition.
        await #expect(throws: EventStoreError(.versionConflict(expected: 1, actual: 1), stream: "s")) {
            try await store.append([event], to: "s", expecting: 1)
        }
        #expect(try await store.version(of: "s") == 1)
        let local = try codec.encode(Inboxed(inboxRow: nil, event: "feedback"))
        #expect(try await store.append([local], to: "s", expecting: 1) == 2)
        #expect(try codec.decode(try await store.read("s", after: 1, limit: 1)[0].payload).event == "feedback")
        await store.close()
        await inbox.close()
    }

    /// A cluster node forgets a row in flight when the store says its event committed: told only the
    /// rows of appends that committed, never those of a refused one.
    @Test func theStoreTellsWhichInboxRowsACommitConsumedAndNoneOfARefusedAppend() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let first = try await inbox.send(Array("a".utf8), to: "s")
        let second = try await inbox.send(Array("b".utf8), to: "t")
        let store = try await PostgresEventStore(
            connecting: database,
            schema: "effectloop",
            inboxRowOf: { InboxedCodec<String>.inboxRow(of: $0) }
        )
        let told = Locked<[[Int64]]>([])
        store.onConsumed { rows in told.withLock { $0.append(rows) } }
        let codec = InboxedCodec(JSONCodec<String>())
        let a = try codec.encode(Inboxed(inboxRow: first, event: "a"))
        let b = try codec.encode(Inboxed(inboxRow: second, event: "b"))
        let local = try codec.encode(Inboxed(inboxRow: nil, event: "local"))
        #expect(try await store.append([a, local], to: "s", expecting: 0) == 2)
        #expect(told.withLock { $0 } == [[first]])
        // A stale version: refused, so its row is still in the inbox and nobody is told of it.
        await #expect(throws: EventStoreError(.versionConflict(expected: 5, actual: 0), stream: "t")) {
            try await store.append([b], to: "t", expecting: 5)
        }
        #expect(told.withLock { $0 } == [[first]])
        #expect(try await inbox.waiting() == 1)
        // An append that consumes no row tells nothing.
        #expect(try await store.append([local], to: "s", expecting: 2) == 3)
        #expect(told.withLock { $0 } == [[first]])
        #expect(try await store.append([b], to: "t", expecting: 0) == 1)
        #expect(told.withLock { $0 } == [[first], [second]])
        await store.close()
        await inbox.close()
    }

    /// The store's callback stays the callback it was given. Kept in a lock whose value was the closure
    /// itself, each commit's read of it wrapped it in two more conversion thunks (the lock's value is
    /// generic, and the read's write-back converted it again), so each call went through twice as many
    /// frames as commits before it: a node slowed with every commit, until its writer's stack overflowed.
    @Test func theConsumedRowsCallbackIsCalledAtTheSameDepthAfterManyCommits() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        let store = try await PostgresEventStore(
            connecting: database,
            schema: "effectloop",
            inboxRowOf: { InboxedCodec<String>.inboxRow(of: $0) }
        )
        let depths = Locked<[Int]>([])
        store.onConsumed { _ in
            let depth = Thread.callStackSymbols.count
            depths.withLock { $0.append(depth) }
        }
        let codec = InboxedCodec(JSONCodec<String>())
        for version in 0..<40 {
            let row = try await inbox.send(Array("e".utf8), to: "s")
            let event = try codec.encode(Inboxed(inboxRow: row, event: "e"))
            #expect(try await store.append([event], to: "s", expecting: UInt64(version)) == UInt64(version) + 1)
        }
        let seen = depths.withLock { $0 }
        #expect(seen.count == 40)
        #expect((seen.max() ?? 0) - (seen.min() ?? 0) < 4, "stack depths of the calls: \(seen)")
        await store.close()
        await inbox.close()
    }
}
