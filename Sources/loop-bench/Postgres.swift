import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport

#if canImport(Glibc)
import Glibc
#endif

// w10: durable events through PostgreSQL. The server is the one `--postgres CONNINFO` names, or a
// throwaway one this run starts with fsync and synchronous commit on, as a production server runs.

/// The conninfo `--postgres` gives (without `dbname`), if any.
let postgresArgument: String? = arguments.firstIndex(of: "--postgres").flatMap {
    arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil
}

/// The server a PostgreSQL workload runs against: `--postgres`'s, or a throwaway one with fsync and
/// synchronous commit on (returned, to be stopped); and the conninfo of its database.
func benchServer() async throws -> (server: TemporaryPostgres?, conninfo: String) {
    if let postgresArgument { return (nil, postgresArgument) }
    let started = try await TemporaryPostgres(durable: true)
    return (started, started.conninfo + " dbname=postgres")
}

extension Workloads {
    /// w10: events sent to 10,000 durable entities on `PostgresEventStore`, each committed (group commit,
    /// `synchronous_commit` on) before its effect runs. Raw: the same rows inserted by a plain libpq loop
    /// in transactions of the same size.
    static func w10(_ sizes: Sizes) async throws -> Outcome {
        let entities = 10_000
        let events = sizes.w10Events
        let (server, base) = try await benchServer()
        defer { server?.stop() }
        var rates: [Double] = []
        var raws: [Double] = []
        var ok = true
        var perTransaction = 0.0
        for run in 0..<sizes.runs {
            let schema = "bench_w10_\(getpid())_\(run)"
            let store = try await PostgresEventStore(connecting: base, schema: schema)
            let (seconds, total) = try await Tally.run(on: store, entities: entities, events: events)
            let transactions = store.transactions
            await store.close()
            ok = ok && total == events
            rates.append(Double(events) / seconds)
            perTransaction = Double(events) / Double(max(1, transactions))
            raws.append(try rawInserts(base, schema: schema, events: events, batch: max(1, Int(perTransaction))))
            try dropSchema(base, schema)
        }
        return Outcome(
            workload: "w10",
            title: "durable events/s, \(entities) entities on PostgreSQL (each committed before its effect)",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            extra: [("events_per_transaction", perTransaction)],
            rates: rates
        )
    }

    /// The raw baseline of w10: `events` rows like the store's, inserted by a plain loop in transactions
    /// of `batch` rows, each one multi-row INSERT, sent with its `BEGIN` and `COMMIT` in one round trip.
    static func rawInserts(_ base: String, schema: String, events: Int, batch: Int) throws -> Double {
        let connection = try PostgresConnection(base)
        defer { connection.close() }
        try connection.execute("CREATE TABLE \(schema).raw (LIKE \(schema).events INCLUDING ALL)")
        let payload = Array(#"{"add":{"_0":1}}"#.utf8)
        var version = [Int64](repeating: 0, count: 10_000)
        let start = ContinuousClock.now
        var sent = 0
        while sent < events {
            let count = min(batch, events - sent)
            var values: [String] = []
            var parameters: [PostgresValue] = []
            for index in 0..<count {
                let entity = (sent + index) % version.count
                version[entity] += 1
                values.append("($\(3 * index + 1), $\(3 * index + 2), $\(3 * index + 3))")
                parameters += [.text("\(entity)"), .int(version[entity]), .bytes(payload)]
            }
            // One round trip for the transaction (libpq's pipeline mode), as the store's writes and commit
            // take one.
            try connection.pipeline([
                PostgresStatement("BEGIN"),
                PostgresStatement(
                    "INSERT INTO \(schema).raw (stream, version, payload) VALUES " + values.joined(separator: ","),
                    parameters
                ),
                PostgresStatement("COMMIT"),
            ])
            sent += count
        }
        let elapsed = ContinuousClock.now - start
        return Double(events) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    static func dropSchema(_ base: String, _ schema: String) throws {
        let connection = try PostgresConnection(base)
        defer { connection.close() }
        try connection.execute("DROP SCHEMA \(schema) CASCADE")
    }
}
