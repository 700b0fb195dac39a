internal import LoopPersistence

/// The way into a cluster's entities from anywhere: an event for an entity is a row of the inbox table,
/// and its commit is the acknowledgment. The node that owns the entity's shard is woken (by a
/// notification the database sends for each insert) and processes the entity's rows in order.
///
/// ```swift
/// let inbox = try await PostgresInbox(connecting: conninfo)
/// try await inbox.send(try JSONCodec<Order.Event>().encode(.placed(order)), to: "order-17")
/// ```
///
/// Any program that can write to PostgreSQL sends the same way, with no EffectLoop code:
///
/// ```sql
/// INSERT INTO effectloop.inbox (stream, payload) VALUES ('order-17', convert_to('{"placed":{...}}', 'UTF8'));
/// ```
///
/// The database sets each row's shard from its stream (`shard_of(stream, shards)`), so senders know
/// nothing of shards or nodes.
public final class PostgresInbox: Sendable {
    private let worker: PostgresWorker
    private let schema: String

    /// Connects to the database `conninfo` names and installs or upgrades the schema, as
    /// ``PostgresEventStore/init(connecting:schema:retention:)`` does.
    public init(connecting conninfo: String, schema: String = "effectloop") async throws {
        guard PostgresEventStore.isIdentifier(schema) else {
            throw EventStoreError(.invalid(reason: "schema name '\(schema)' is not a plain SQL identifier"))
        }
        self.schema = schema
        self.worker = PostgresWorker(conninfo, label: "effectloop.postgres.inbox")
        do {
            try await worker.run { connection throws(PostgresError) in
                try PostgresSchema.install(schema, on: connection)
            }
        } catch {
            await worker.close()
            throw PostgresEventStore.storeError(error, doing: "install the schema")
        }
    }

    /// Puts `payload` (an event, encoded with the cluster's codec) in `stream`'s inbox; returns the row's
    /// id once it is committed. An error means the row may not be stored: send again.
    @discardableResult
    public func send(_ payload: [UInt8], to stream: String) async throws -> Int64 {
        if let problem = PostgresEventStore.problem(with: [payload], stream: stream) {
            throw EventStoreError(.invalid(reason: problem), stream: stream)
        }
        let table = "\(schema).inbox"
        do {
            return try await worker.run { connection throws(PostgresError) in
                let rows = try connection.execute(
                    "INSERT INTO \(table) (stream, payload) VALUES ($1, $2) RETURNING id",
                    [.stream(stream), .bytes(payload)]
                )
                return try rows.int(0, 0)
            }
        } catch {
            throw PostgresEventStore.storeError(error, doing: "send to the inbox", stream: stream)
        }
    }

    /// Puts every `(stream, payload)` of `rows` in the inbox in one transaction, in order; returns once
    /// they are committed (all of them, or none on an error).
    public func send(_ rows: [(stream: String, payload: [UInt8])]) async throws {
        guard !rows.isEmpty else { return }
        for row in rows {
            if let problem = PostgresEventStore.problem(with: [row.payload], stream: row.stream) {
                throw EventStoreError(.invalid(reason: problem), stream: row.stream)
            }
        }
        let table = "\(schema).inbox"
        let batch = rows.map { PostgresValue.stream($0.stream) } + rows.map { PostgresValue.bytes($0.payload) }
        let count = rows.count
        do {
            _ = try await worker.run { connection throws(PostgresError) in
                var start = 0
                try connection.execute("BEGIN")
                do throws(PostgresError) {
                    while start < count {
                        let end = min(count, start + 20_000)
                        let values = (start..<end).map { "($\(2 * ($0 - start) + 1), $\(2 * ($0 - start) + 2))" }
                        var parameters: [PostgresValue] = []
                        for index in start..<end { parameters += [batch[index], batch[count + index]] }
                        try connection.execute(
                            "INSERT INTO \(table) (stream, payload) VALUES " + values.joined(separator: ","),
                            parameters
                        )
                        start = end
                    }
                    try connection.execute("COMMIT")
                } catch {
                    if error.kind != .connection { _ = try? connection.execute("ROLLBACK") }
                    throw error
                }
            }
        } catch {
            throw PostgresEventStore.storeError(error, doing: "send to the inbox")
        }
    }

    /// How many rows wait in the inbox, in all shards.
    public func waiting() async throws -> Int {
        let table = "\(schema).inbox"
        do {
            return try await worker.run { connection throws(PostgresError) in
                Int(try connection.execute("SELECT count(*)::bigint FROM \(table)").int(0, 0))
            }
        } catch {
            throw PostgresEventStore.storeError(error, doing: "count the inbox")
        }
    }

    /// Closes the connection.
    public func close() async {
        await worker.close()
    }
}
