#if os(Linux)
import LoopSupport
import LoopTesting
import Testing

@Suite struct ThrowawayPostgresTests {
    /// Each call is a database of its own on one server, and a client can use it at once.
    @Test func eachDatabaseIsNewAndAnswers() async throws {
        let first = try await ThrowawayPostgres.database()
        let second = try await ThrowawayPostgres.database()
        #expect(first != second)
        #expect(first.contains(" dbname="))
        try await TemporaryPostgres.psql(first, sql: "CREATE TABLE t (n int); INSERT INTO t VALUES (7)")
        let rows = try await TemporaryPostgres.psql(first, sql: "SELECT n FROM t")
        #expect(rows.split(whereSeparator: \.isWhitespace) == ["7"])
        // The second database is empty: the table is the first one's only.
        await #expect(throws: (any Error).self) { try await TemporaryPostgres.psql(second, sql: "SELECT n FROM t") }
    }
}
#endif
