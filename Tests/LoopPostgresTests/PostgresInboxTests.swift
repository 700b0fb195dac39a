import LoopPersistence
import LoopPostgres
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

    /// A row a program inserts itself under a decomposed name ("e" and a combining accent) is
    /// composed by the inbox's trigger, as the library composes the names it sends: both rows are one
    /// stream, in one shard.
    @Test func rowsUnderTwoSpellingsOfANameAreOneStream() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let inbox = try await PostgresInbox(connecting: database)
        try await inbox.send(Array("one".utf8), to: "cafe\u{301}")
        try await TemporaryPostgres.psql(
            database,
            sql: "INSERT INTO effectloop.inbox (stream, payload) VALUES (U&'cafe\\0301', convert_to('two', 'UTF8'))"
        )
        let rows = try await TemporaryPostgres.psql(
            database,
            sql: """
                SELECT encode(convert_to(stream, 'UTF8'), 'hex') || ' ' || (shard = effectloop.shard_of(U&'caf\\00E9', 64))
                FROM effectloop.inbox ORDER BY id
                """
        )
        #expect(rows.split(separator: "\n") == ["636166c3a9 true", "636166c3a9 true"])
        await inbox.close()
    }

    /// A store written before names were composed: upgrading composes the names stored in another
    /// spelling (events, snapshots, the inbox, the marks of work under way), and refuses, naming
    /// them, streams that are one name in two spellings (they cannot be made one), leaving the schema
    /// as it was.
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
                UPDATE old.effectloop_meta SET value = 6 WHERE key = 'schema_version';
                """
        )
        let upgraded = try await PostgresEventStore(connecting: database, schema: "old")
        #expect(try await upgraded.read("caf\u{E9}", after: 0, limit: 10).map(\.payload) == [[1], [2]])
        #expect(try await upgraded.latestSnapshot(of: "caf\u{E9}")?.version == 2)
        #expect(try await upgraded.streams() == ["caf\u{E9}", "plain"])
        await upgraded.close()
        let marks = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT encode(convert_to(stream, 'UTF8'), 'hex') || ' ' || shard FROM old.awake"
        )
        let shard = try await TemporaryPostgres.psql(database, sql: "SELECT old.shard_of(U&'caf\\00E9', 64)")
        #expect(marks.filter { $0 != "\n" } == "636166c3a9 " + shard.filter { !$0.isWhitespace })

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
            #expect("\(error)".contains("several spellings of one name ('\u{C5}')"), "\(error)")
        }
        let version = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT value FROM old.effectloop_meta WHERE key = 'schema_version'"
        )
        #expect(version.filter { !$0.isWhitespace } == "6")
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
        #expect(version.filter { !$0.isWhitespace } == "7")
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
}
