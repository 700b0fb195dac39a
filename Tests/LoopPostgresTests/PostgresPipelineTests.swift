import LoopPostgres
import LoopSupport
import Testing

/// A connection's pipeline (several statements in one round trip), with the failures a server and a
/// network can bring: a statement refused midway, a session ended under it, a closed connection.
@Suite("PostgresConnection, pipelines")
struct PostgresPipelineTests {
    static func connect() async throws -> PostgresConnection {
        try PostgresConnection(try await TemporaryPostgres.shared().createDatabase())
    }

    @Test func aPipelineRunsItsStatementsInOrderAndReturnsEachOnesRows() async throws {
        let connection = try await Self.connect()
        defer { connection.close() }
        do {
            try connection.execute("CREATE TABLE t (n bigint PRIMARY KEY)")
            let insert = PostgresStatement("INSERT INTO t VALUES ($1::bigint)", [.int(1)], prepared: true)
            let results = try connection.pipeline([
                PostgresStatement("BEGIN"),
                insert,
                PostgresStatement("INSERT INTO t VALUES ($1::bigint), ($2::bigint)", [.int(2), .int(3)]),
                PostgresStatement("SELECT count(*) FROM t"),
                PostgresStatement("COMMIT"),
            ])
            #expect(results.count == 5)
            #expect(results[1].affected == 1)
            #expect(results[2].affected == 2)
            // The count sees the rows inserted before it in the same pipeline.
            #expect(try results[3].int(0, 0) == 3)
            // A prepared statement runs again by name, in a second pipeline.
            let again = try connection.pipeline([
                PostgresStatement("INSERT INTO t VALUES ($1::bigint)", [.int(4)], prepared: true),
                PostgresStatement("SELECT n FROM t ORDER BY n"),
            ])
            #expect(try again[1].rows.indices.map { try again[1].int($0, 0) } == [1, 2, 3, 4])
        }
    }

    @Test func aRefusedStatementThrowsItsErrorAndTheStatementsAfterItDoNotRun() async throws {
        let connection = try await Self.connect()
        defer { connection.close() }
        do {
            try connection.execute("CREATE TABLE t (n bigint PRIMARY KEY)")
            try connection.execute("INSERT INTO t VALUES (1)")
            do {
                try connection.pipeline([
                    PostgresStatement("BEGIN"),
                    PostgresStatement("INSERT INTO t VALUES (2)"),
                    // A unique violation midway.
                    PostgresStatement("INSERT INTO t VALUES (1)"),
                    PostgresStatement("INSERT INTO t VALUES (3)"),
                    PostgresStatement("COMMIT"),
                ])
                Issue.record("a pipeline with a unique violation succeeded")
            } catch {
                #expect(error.kind == .statement)
                #expect(error.isUniqueViolation)
            }
            // The commit did not run: the transaction is open and aborted, and rolls back.
            try connection.execute("ROLLBACK")
            let rows = try connection.execute("SELECT n FROM t ORDER BY n")
            #expect(try rows.rows.indices.map { try rows.int($0, 0) } == [1])
            // The connection is left out of pipeline mode, ready for statements one by one or in pipelines.
            #expect(try connection.pipeline([PostgresStatement("SELECT 1::bigint")])[0].int(0, 0) == 1)
        }
    }

    @Test func aSessionEndedUnderAPipelineIsAConnectionErrorAndReconnecting() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let connection = try PostgresConnection(database)
        let pid = try connection.execute("SELECT pg_backend_pid()::bigint").int(0, 0)
        let other = try PostgresConnection(database)
        // Returns once the session has ended (or after 10 s, false).
        let terminated = try other.execute("SELECT pg_terminate_backend($1::integer, 10000)::int::bigint", [.int(pid)])
        other.close()
        #expect(try terminated.int(0, 0) == 1)
        do {
            try connection.pipeline([PostgresStatement("BEGIN"), PostgresStatement("SELECT 1"), .init("COMMIT")])
            Issue.record("a pipeline ran on a session the server had ended")
        } catch {
            // A connection error, which the stores answer by reconnecting (not by rolling back).
            #expect(error.kind == .connection, "\(error)")
        }
        #expect(!connection.isConnected)
        #expect(connection.reconnect())
        #expect(try connection.pipeline([PostgresStatement("SELECT 2::bigint")])[0].int(0, 0) == 2)
        connection.close()
    }

    @Test func aClosedConnectionRefusesAPipeline() async throws {
        let connection = try await Self.connect()
        connection.close()
        #expect(throws: PostgresError(.connection, message: "the connection is closed")) {
            try connection.pipeline([PostgresStatement("SELECT 1")])
        }
    }

    @Test func anEmptyPipelineReturnsNothing() async throws {
        let connection = try await Self.connect()
        defer { connection.close() }
        #expect(try connection.pipeline([]).isEmpty)
        #expect(try connection.execute("SELECT 3::bigint").int(0, 0) == 3)
    }
}
