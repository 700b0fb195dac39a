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
        #expect(version.filter { !$0.isWhitespace } == "6")
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
