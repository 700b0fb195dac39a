import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport
import LoopTesting
import Testing

@Suite("PostgresEventStore", .serialized)
struct PostgresEventStoreTests {
    @Test func passesTheConformanceSuite() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let counter = Locked(0)
        let stores = Locked<[PostgresEventStore]>([])
        let failures = await EventStoreConformance(scale: 100_000) {
            let number = counter.withLock { count in
                count += 1
                return count
            }
            let store = try await PostgresEventStore(connecting: database, schema: "check_\(number)")
            stores.withLock { $0.append(store) }
            return store
        }
        .run()
        #expect(failures.isEmpty, "\(failures)")
        for store in stores.withLock({ $0 }) { await store.close() }
    }
}

@Suite("PostgresEventStore, hostile cases")
struct PostgresHostileTests {
    static func payload(_ number: Int) -> [UInt8] { Array("event \(number)".utf8) }

    static func outcome(_ body: () async throws -> UInt64) async -> Result<UInt64, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    @Test func aServerThatIsNotThereIsAClearError() async throws {
        do {
            _ = try await PostgresEventStore(connecting: "host=/nonexistent-effectloop user=nobody dbname=none")
            Issue.record("a store opened on a server that does not exist")
        } catch let error as EventStoreError {
            guard case .unavailable(let reason) = error.kind else {
                Issue.record("\(error), expected unavailable")
                return
            }
            #expect(reason.contains("install the schema") && reason.contains("/nonexistent-effectloop"))
        }
    }

    @Test func aSchemaNameThatIsNotAnIdentifierIsRefused() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        for name in ["", "1abc", "a;DROP TABLE x", "Upper", String(repeating: "a", count: 64)] {
            await #expect(
                throws: EventStoreError(.invalid(reason: "schema name '\(name)' is not a plain SQL identifier"))
            ) {
                _ = try await PostgresEventStore(connecting: database, schema: name)
            }
        }
    }

    @Test func aSchemaNewerThanTheLibraryIsRefusedAndLeftAsItIs() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database, schema: "future")
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        await store.close()
        try await TemporaryPostgres.psql(database, sql: "UPDATE future.effectloop_meta SET value = 99")
        do {
            _ = try await PostgresEventStore(connecting: database, schema: "future")
            Issue.record("a store opened a schema at version 99")
        } catch let error as EventStoreError {
            #expect("\(error)".contains("version 99"))
        }
        let rows = try await TemporaryPostgres.psql(database, sql: "SELECT count(*) FROM future.events")
        #expect(rows.filter { !$0.isWhitespace } == "1")
    }

    @Test func twoStoresOnOneSchemaNeverBothWinTheSameVersion() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let first = try await PostgresEventStore(connecting: database, schema: "shared")
        let second = try await PostgresEventStore(connecting: database, schema: "shared")
        for round in 0..<20 {
            let expected = UInt64(round)
            async let left = Self.outcome {
                try await first.append([Self.payload(round * 2)], to: "s", expecting: expected)
            }
            async let right = Self.outcome {
                try await second.append([Self.payload(round * 2 + 1)], to: "s", expecting: expected)
            }
            let outcomes = await [left, right]
            let won = outcomes.filter { (try? $0.get()) == expected + 1 }.count
            #expect(won == 1, "round \(round): \(outcomes)")
            for case .failure(let error) in outcomes {
                #expect((error as? EventStoreError)?.kind == .versionConflict(expected: expected, actual: expected + 1))
            }
        }
        let events = try await first.read("s", after: 0, limit: 100)
        #expect(events.map(\.version) == Array(1...20))
        await first.close()
        await second.close()
    }

    @Test func appendsFromManyLoopsShareTransactions() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database)
        let before = store.transactions
        // The writer is held while the appends queue, as it is while a transaction commits.
        let release = store.holdWriter()
        let versions = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for stream in 0..<1_000 {
                group.addTask { try await store.append([Self.payload(stream)], to: "entity-\(stream)", expecting: 0) }
            }
            while store.queuedAppends < 1_000 { await Task.yield() }
            release()
            return try await group.reduce(into: [UInt64]()) { $0.append($1) }
        }
        #expect(versions.count == 1_000 && versions.allSatisfy { $0 == 1 })
        #expect(store.transactions - before == 1)
        await store.close()
    }

    @Test func aConnectionTheServerDropsFailsClearlyAndTheNextAppendReconnects() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        let name = database.split(separator: " ").first { $0.hasPrefix("dbname=") }?.dropFirst(7) ?? ""
        try await TemporaryPostgres.psql(
            database,
            sql:
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '\(name)' AND pid <> pg_backend_pid()"
        )
        do {
            _ = try await store.append([Self.payload(2)], to: "s", expecting: 1)
            Issue.record("an append on a dropped connection succeeded")
        } catch let error as EventStoreError {
            guard case .unavailable = error.kind else {
                Issue.record("\(error), expected unavailable")
                return
            }
        }
        // Nothing of the failed append was stored; the store connects again.
        #expect(try await store.append([Self.payload(2)], to: "s", expecting: 1) == 2)
        #expect(try await store.read("s", after: 0, limit: 10).map(\.payload) == [Self.payload(1), Self.payload(2)])
        await store.close()
    }

    @Test func aClosedStoreRefusesEverything() async throws {
        let store = try await PostgresEventStore(connecting: try await TemporaryPostgres.shared().createDatabase())
        await store.close()
        await #expect(throws: EventStoreError(.unavailable(reason: "the store is closed"), stream: "s")) {
            try await store.append([Self.payload(1)], to: "s", expecting: 0)
        }
        await #expect(throws: EventStoreError(.unavailable(reason: "the store is closed"), stream: "s")) {
            try await store.version(of: "s")
        }
    }
}

@Suite("PostgresEventStore, what the server would refuse")
struct PostgresRefusalTests {
    @Test func aStreamNameWithANULFailsAloneNotItsBatch() async throws {
        let store = try await PostgresEventStore(connecting: try await TemporaryPostgres.shared().createDatabase())
        let release = store.holdWriter()
        async let good = store.append([[1]], to: "good", expecting: 0)
        async let bad = PostgresHostileTests.outcome { try await store.append([[2]], to: "bad\u{0}name", expecting: 0) }
        while store.queuedAppends < 1 { await Task.yield() }
        release()
        #expect(try await good == 1)
        let refused = await bad
        guard case .failure(let error) = refused else {
            Issue.record("an append to a stream with a NUL in its name was stored")
            return
        }
        #expect(
            error as? EventStoreError
                == EventStoreError(.invalid(reason: "a stream name with a NUL character"), stream: "bad\u{0}name")
        )
        await store.close()
    }

    /// A name is sent and read as UTF-8 whatever the conninfo asks for (asked here; `PGCLIENTENCODING`
    /// only sets a default the conninfo overrides): in LATIN1 the server would take `é`'s two bytes for
    /// two characters and store a name psql and other processes spell differently.
    @Test func namesAreSentAsUTF8WhateverTheConninfoAsks() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database + " client_encoding=LATIN1")
        #expect(try await store.append([[1]], to: "caf\u{E9}", expecting: 0) == 1)
        let psql = database + " client_encoding=UTF8"
        let stored = try await TemporaryPostgres.psql(
            psql,
            sql: "SELECT encode(convert_to(stream, 'UTF8'), 'hex') || ' ' || length(stream) FROM effectloop.events"
        )
        #expect(stored.split(separator: "\n") == ["636166c3a9 4"])
        // Written by another process, read by the store under the same name.
        try await TemporaryPostgres.psql(
            psql,
            sql: """
                INSERT INTO effectloop.events (stream, version, payload) VALUES (U&'na\\00EFve', 1, '\\x05')
                """
        )
        #expect(try await store.read("na\u{EF}ve", after: 0, limit: 10).map(\.payload) == [[5]])
        await store.close()
    }

    /// A database in an encoding other than UTF-8 (or `SQL_ASCII`, which keeps bytes as they come) is
    /// refused when a store or an inbox connects (a node connects through its store), with a message
    /// that says what to use, and nothing is installed in it: most names could not be stored, and one
    /// that could not would fail its whole batch.
    @Test func aDatabaseEncodedInLatin1IsRefusedAndLeftAsItWas() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase(encoding: "LATIN1")
        let name = database.split(separator: "=").last.map(String.init) ?? database
        let refusals: [any Error] = [
            await Self.failure { _ = try await PostgresEventStore(connecting: database) },
            await Self.failure { _ = try await PostgresInbox(connecting: database) },
        ]
        for refusal in refusals {
            guard case .unavailable(let reason)? = (refusal as? EventStoreError)?.kind else {
                Issue.record("\(refusal), expected unavailable")
                continue
            }
            #expect(
                reason.contains("'\(name)' is encoded in LATIN1") && reason.contains("ENCODING 'UTF8'"),
                "\(reason)"
            )
        }
        let schemas = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT count(*) FROM pg_namespace WHERE nspname = 'effectloop'"
        )
        #expect(schemas.filter { !$0.isWhitespace } == "0")
    }

    static func failure(_ body: () async throws -> Void) async -> any Error {
        do {
            try await body()
            return CancellationError()
        } catch {
            return error
        }
    }

    /// Two spellings of one name are one stream, as Swift compares strings and the file store keeps
    /// them, also when both are appended to in one batch (the first queued wins, the other conflicts),
    /// and the database holds the name composed (NFC), so its shard is that of the composed name.
    @Test func twoSpellingsOfANameAreOneStreamEvenInOneBatch() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database)
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let release = store.holdWriter()
        async let first = PostgresHostileTests.outcome { try await store.append([[1]], to: composed, expecting: 0) }
        async let second = PostgresHostileTests.outcome {
            try await store.append([[2], [3]], to: decomposed, expecting: 0)
        }
        while store.queuedAppends < 2 { await Task.yield() }
        release()
        let outcomes = await [first, second]
        let won = outcomes.compactMap { try? $0.get() }
        #expect(won == [1] || won == [2], "\(outcomes)")
        let conflicts = outcomes.filter {
            guard case .failure(let error) = $0 else { return false }
            return (error as? EventStoreError)?.kind == .versionConflict(expected: 0, actual: won.first ?? 0)
        }
        #expect(conflicts.count == 1, "\(outcomes)")
        let read = try await store.read(decomposed, after: 0, limit: 10).map(\.payload)
        #expect(read == (won == [1] ? [[1]] : [[2], [3]]))
        #expect(try await store.streams() == [composed])
        let stored = try await TemporaryPostgres.psql(
            database,
            sql: """
                SELECT encode(convert_to(stream, 'UTF8'), 'hex') || ' ' || (shard = effectloop.shard_of(U&'caf\\00E9', 64))
                FROM effectloop.events GROUP BY stream, shard
                """
        )
        #expect(stored.split(separator: "\n") == ["636166c3a9 true"])
        await store.close()
    }
}

@Suite("PostgresEventStore, retention")
struct PostgresRetentionTests {
    @Test func retentionKeepsTheEventsAfterTheLatestSnapshotsAndDeletesTheRestInBatches() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let store = try await PostgresEventStore(connecting: database, retention: .afterSnapshots(2))
        var version: UInt64 = 0
        for round in 1...3 {
            let batch = (0..<12_000).map { Array("e\(round)-\($0)".utf8) }
            version = try await store.append(batch, to: "hot", expecting: version)
            try await store.save(Snapshot(stream: "hot", version: version, payload: [UInt8(round)]))
        }
        // An older snapshot saved late changes nothing.
        try await store.save(Snapshot(stream: "hot", version: 100, payload: [9]))
        #expect(try await store.version(of: "hot") == 36_000)
        #expect(try await store.latestSnapshot(of: "hot") == Snapshot(stream: "hot", version: 36_000, payload: [3]))
        let kept = try await store.read("hot", after: 24_000, limit: 100_000)
        #expect(kept.map(\.version) == Array(24_001...36_000))
        #expect(kept.last?.payload == Array("e3-11999".utf8))
        await #expect(throws: EventStoreError.self) { try await store.read("hot", after: 23_999, limit: 10) }
        let rows = try await TemporaryPostgres.psql(
            database,
            sql: "SELECT (SELECT count(*) FROM effectloop.events), (SELECT count(*) FROM effectloop.snapshots)"
        )
        #expect(rows.filter { !$0.isWhitespace } == "12000|2")

        // A stream that keeps no event keeps its last one, and so its version.
        _ = try await store.append([[1], [2], [3]], to: "done", expecting: 0)
        try await store.save(Snapshot(stream: "done", version: 3, payload: [3]))
        let only = try await PostgresEventStore(connecting: database, retention: .afterSnapshots(1))
        try await only.save(Snapshot(stream: "done", version: 3, payload: [3]))
        #expect(try await only.version(of: "done") == 3)
        #expect(try await only.append([[4]], to: "done", expecting: 3) == 4)
        #expect(try await only.read("done", after: 3, limit: 10).map(\.payload) == [[4]])
        await only.close()
        await store.close()
    }
}
