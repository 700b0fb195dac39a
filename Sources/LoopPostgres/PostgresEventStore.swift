internal import Dispatch
public import LoopPersistence
internal import LoopRuntime
internal import Synchronization

/// An ``/LoopPersistence/EventStore`` in PostgreSQL, for durable loops that more than one process (or
/// machine) shares: the same protocol, and the same conformance suite, as the file store.
///
/// ```swift
/// let store = try await PostgresEventStore(connecting: "host=/run/postgresql dbname=app")
/// let orders = DurableLoopGroup(store: store, ...)
/// ```
///
/// - **Schema.** The store installs its tables in `schema` (default `effectloop`) the first time, and
///   records the schema's version; a store that finds a newer version than it knows refuses to open.
/// - **Group commit.** Appends from every loop of the process wait in one queue; the writer takes them
///   all, checks each one's expected version, and writes the whole batch in one transaction (one
///   `COMMIT`, one flush of the server's log) with one `INSERT` (its rows in array parameters, so the
///   statement is prepared once per connection, whatever the batch's size).
/// - **Conflicts.** `(stream, version)` is the table's primary key, so two writers that expect the
///   same version cannot both commit: the database refuses the second, which reports
///   ``/LoopPersistence/EventStoreError/Kind/versionConflict(expected:actual:)``. A batch that meets
///   such a conflict is rolled back and checked again, so the other appends of the batch still commit.
/// - **Retention.** With ``/LoopPersistence/Retention/afterSnapshots(_:)``, each save keeps the stream's
///   latest N snapshots and deletes its events up to the oldest of them (never its last event, which
///   holds its version), 10,000 rows per statement; reads from below it fail as `invalid`.
/// - **Failures.** A broken connection fails the appends of the batch under way with
///   ``/LoopPersistence/EventStoreError/Kind/unavailable(reason:)`` (when it broke during `COMMIT`, the
///   batch may or may not have been stored: the next append's version check tells); the next operation
///   connects again.
public final class PostgresEventStore: EventStore {
    /// The most appends one transaction takes, so one loop's huge append does not hold the others long.
    static let appendsPerBatch = 4_096

    /// The inbox row an event's payload consumed, for a cluster node's store; `nil` for a plain store.
    private let inboxRowOf: (@Sendable ([UInt8]) -> Int64?)?
    /// The answers to keyed requests an event's payload records, for a cluster node's store.
    private let answersOf: (@Sendable ([UInt8]) -> [RecordedAnswer])?
    private let writer: PostgresWorker
    private let reader: PostgresWorker
    private let schema: String
    private let retention: Retention
    private let queue = Locked(WriteQueue())
    /// How appends prove their writer owns their streams, for a cluster node's store.
    private let fencing = Locked<PostgresBatch.Fencing?>(nil)
    /// Told the inbox rows each committed transaction consumed, for a cluster node's store.
    ///
    /// In a struct: a lock whose value is the closure itself keeps it in the generic's form, and each
    /// read (`withLock { $0 }`, whose write-back converts it again) wrapped it in two more conversion
    /// thunks, so each commit's call went two frames deeper than the last one's.
    private let consumed = Locked<ConsumedRows?>(nil)

    /// The callback of ``onConsumed(_:)``.
    private struct ConsumedRows {
        let body: @Sendable ([Int64]) -> Void
    }
    private let batches = Atomic<Int>(0)

    /// How many transactions the writer has committed (or tried to): fewer than the appends when
    /// group commit batches them. For tests.
    package var transactions: Int { batches.load(ordering: .relaxed) }

    /// How many appends wait for the writer. For tests.
    package var queuedAppends: Int { queue.withLock { $0.commits.count } }

    /// Holds the writer until the returned function is called: appends made meanwhile queue up, and the
    /// writer then takes them together. For tests of group commit.
    package func holdWriter() -> @Sendable () -> Void {
        let gate = DispatchSemaphore(value: 0)
        writer.schedule { gate.wait() }
        return { gate.signal() }
    }

    private struct WriteQueue {
        var commits = GroupCommit<PendingAppend>()
        var closed = false
    }

    private struct PendingAppend: Sendable {
        var payloads: [[UInt8]]
        /// Composed, as the table keeps it (``StreamName/canonical(_:)``).
        var stream: String
        var expected: UInt64
        var continuation: CheckedContinuation<Result<UInt64, EventStoreError>, Never>
    }

    /// Connects to the database `conninfo` names (`host=/tmp/pg dbname=app`, or a `postgresql://` URL)
    /// and installs or upgrades the store's tables in `schema` (letters, digits and `_`, starting with a
    /// letter or `_`).
    ///
    /// - Throws: ``/LoopPersistence/EventStoreError`` `.invalid` for a bad schema name, `.unavailable`
    ///   when the server cannot be reached or its schema is newer than this library.
    ///
    /// `retention` says which events the store keeps (every one by default).
    public convenience init(
        connecting conninfo: String,
        schema: String = "effectloop",
        retention: Retention = .keepAll
    ) async throws {
        try await self.init(connecting: conninfo, schema: schema, inboxRowOf: nil, retention: retention)
    }

    /// A store whose appends also consume inbox rows: `inboxRowOf` reads, from an event's payload, the id of
    /// the inbox row it came from; the row is deleted in the transaction that appends the event, and
    /// `events.inbox_id` is unique, so a row is consumed by exactly one committed event. `answersOf`
    /// reads the answers to keyed requests an event records: the same transaction writes each to the
    /// `replies` row its caller waits on, and notifies the caller's channel.
    package init(
        connecting conninfo: String,
        schema: String,
        inboxRowOf: (@Sendable ([UInt8]) -> Int64?)?,
        answersOf: (@Sendable ([UInt8]) -> [RecordedAnswer])? = nil,
        applicationName: String? = nil,
        retention: Retention = .keepAll
    ) async throws {
        self.inboxRowOf = inboxRowOf
        self.answersOf = answersOf
        self.retention = retention
        guard Self.isIdentifier(schema) else {
            throw EventStoreError(.invalid(reason: "schema name '\(schema)' is not a plain SQL identifier"))
        }
        self.schema = schema
        self.writer = PostgresWorker(
            conninfo,
            label: "effectloop.postgres.writer",
            applicationName: applicationName,
            setup: [keyedLookupsOnly]
        )
        self.reader = PostgresWorker(conninfo, label: "effectloop.postgres.reader")
        do {
            try await writer.run { [schema] connection throws(PostgresError) in
                try PostgresSchema.install(schema, on: connection)
            }
        } catch {
            await close()
            throw Self.storeError(error, doing: "install the schema")
        }
    }

    /// Makes every later append check, in its transaction, that a session (the node's lock connection)
    /// holds the advisory lock keyed `token + shard` for its stream's shard (of `shards`); appends of
    /// streams whose key is not held fail with `fenced`, and write nothing.
    package func fence(token: Int64, shards: Int) {
        fencing.withLock { $0 = PostgresBatch.Fencing(token: token, shards: shards) }
    }

    /// Calls `body`, after each transaction commits, with the inbox rows its events consumed (deleted),
    /// as `inboxRowOf` reads them; on the writer's thread, so it must return quickly.
    package func onConsumed(_ body: @escaping @Sendable ([Int64]) -> Void) {
        consumed.withLock { $0 = ConsumedRows(body: body) }
    }

    /// Closes the store's connections once the appends already queued are written; later operations
    /// fail with `.unavailable`.
    public func close() async {
        queue.withLock { $0.closed = true }
        await writer.close()
        await reader.close()
    }

    // MARK: EventStore

    /// Appends `payloads` to `stream` in the next batch the writer commits. See ``/LoopPersistence/EventStore/append(_:to:expecting:)``.
    public func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64
    ) async throws
        -> UInt64
    {
        if let problem = Self.problem(with: payloads, stream: stream) {
            throw EventStoreError(.invalid(reason: problem), stream: stream)
        }
        // Composed here, by the caller, once: not by the writer, for a whole batch on its one thread.
        let stored = StreamName.canonical(stream)
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<UInt64, EventStoreError>, Never>) in
            let pending = PendingAppend(
                payloads: payloads,
                stream: stored,
                expected: expectedVersion,
                continuation: continuation
            )
            let start = queue.withLock { queue -> Bool? in
                guard !queue.closed else { return nil }
                return queue.commits.enqueue(pending)
            }
            switch start {
            case nil:
                continuation.resume(returning: .failure(Self.closedError(stream)))
            case true?:
                writer.schedule { self.writeQueued() }
            case false?:
                break
            }
        }
        return try result.get()
    }

    /// See ``/LoopPersistence/EventStore/read(_:after:limit:)``.
    public func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
        guard limit > 0 else { return [] }
        let table = "\(schema).events"
        let (snapshots, keep) = ("\(schema).snapshots", retention.keptSnapshots)
        if keep > 0 {
            let kept = try await reading(stream, "read the retention point") { connection throws(PostgresError) in
                try Self.retainedAfter(stream, keep: keep, in: snapshots, on: connection)
            }
            guard version >= kept else {
                throw EventStoreError(
                    .invalid(
                        reason: "events up to version \(kept) are not kept (\(retention)): read after \(kept) or later"
                    ),
                    stream: stream
                )
            }
        }
        let events = try await reading(stream, "read events") { connection throws(PostgresError) in
            let rows = try connection.execute(
                "SELECT version, payload FROM \(table) WHERE stream = $1 AND version > $2 ORDER BY version LIMIT $3",
                [.stream(stream), .int(Int64(clamping: version)), .int(Int64(limit))],
                prepared: true
            )
            var events: [StoredEvent] = []
            events.reserveCapacity(rows.rows.count)
            for row in rows.rows.indices {
                let version = try rows.version(row, 0)
                events.append(StoredEvent(stream: stream, version: version, payload: try rows.bytes(row, 1)))
            }
            return events
        }
        // A save between the check and the select may have deleted the events asked for: never a gap.
        if keep > 0, let first = events.first, first.version != version + 1 {
            throw EventStoreError(
                .invalid(reason: "events up to version \(first.version - 1) are not kept (\(retention))"),
                stream: stream
            )
        }
        return events
    }

    /// See ``/LoopPersistence/EventStore/version(of:)``.
    public func version(of stream: String) async throws -> UInt64 {
        let table = "\(schema).events"
        return try await reading(stream, "read the stream's version") { connection throws(PostgresError) in
            let rows = try connection.execute(
                "SELECT coalesce(max(version), 0)::bigint FROM \(table) WHERE stream = $1",
                [.stream(stream)],
                prepared: true
            )
            return try rows.version(0, 0)
        }
    }

    /// See ``/LoopPersistence/EventStore/save(_:)``.
    public func save(_ snapshot: Snapshot) async throws {
        let current = try await version(of: snapshot.stream)
        guard snapshot.version <= current else {
            throw EventStoreError(
                .invalid(reason: "snapshot at version \(snapshot.version) past the stream's version \(current)"),
                stream: snapshot.stream
            )
        }
        let (table, events) = ("\(schema).snapshots", "\(schema).events")
        let (tracked, keep) = (retention.trackedSnapshots, retention.keptSnapshots)
        _ = try await reading(snapshot.stream, "save a snapshot") { connection throws(PostgresError) in
            try connection.execute(
                """
                INSERT INTO \(table) (stream, version, payload) SELECT $1, $2, $3
                WHERE NOT EXISTS (SELECT 1 FROM \(table) WHERE stream = $1 AND version >= $2)
                ON CONFLICT (stream, version) DO NOTHING
                """,
                [.stream(snapshot.stream), .int(Int64(clamping: snapshot.version)), .bytes(snapshot.payload)]
            )
            // The latest `tracked` snapshots stay (one when every event is kept, as before retention).
            try connection.execute(
                """
                DELETE FROM \(table) WHERE stream = $1 AND version < (
                    SELECT version FROM \(table) WHERE stream = $1 ORDER BY version DESC OFFSET $2 LIMIT 1
                )
                """,
                [.stream(snapshot.stream), .int(Int64(tracked - 1))]
            )
            guard keep > 0 else { return }
            let kept = try Self.retainedAfter(snapshot.stream, keep: keep, in: table, on: connection)
            guard kept > 0 else { return }
            // In bounded statements, each its own transaction; the last event stays: it holds the version.
            while true {
                let deleted = try connection.execute(
                    """
                    WITH gone AS (
                        SELECT version FROM \(events) WHERE stream = $1 AND version <= $2
                        AND version < (SELECT max(version) FROM \(events) WHERE stream = $1)
                        ORDER BY version LIMIT \(Self.deletionsPerStatement)
                    )
                    DELETE FROM \(events) WHERE stream = $1 AND version IN (SELECT version FROM gone)
                    RETURNING 1
                    """,
                    [.stream(snapshot.stream), .int(Int64(clamping: kept))]
                )
                guard deleted.rows.count == Self.deletionsPerStatement else { break }
            }
        }
    }

    /// The most event rows one statement of retention deletes.
    static let deletionsPerStatement = 10_000

    /// The version up to which `stream` keeps no events under a policy keeping the events after its
    /// latest `keep` snapshots: the oldest of them, once it has that many; 0 before.
    private static func retainedAfter(
        _ stream: String,
        keep: Int,
        in snapshots: String,
        on connection: PostgresConnection
    ) throws(PostgresError) -> UInt64 {
        let rows = try connection.execute(
            "SELECT version FROM \(snapshots) WHERE stream = $1 ORDER BY version DESC OFFSET $2 LIMIT 1",
            [.stream(stream), .int(Int64(keep - 1))]
        )
        return rows.rows.isEmpty ? 0 : try rows.version(0, 0)
    }

    /// See ``/LoopPersistence/EventStore/latestSnapshot(of:)``.
    public func latestSnapshot(of stream: String) async throws -> Snapshot? {
        let table = "\(schema).snapshots"
        return try await reading(stream, "read the latest snapshot") { connection throws(PostgresError) in
            let rows = try connection.execute(
                "SELECT version, payload FROM \(table) WHERE stream = $1 ORDER BY version DESC LIMIT 1",
                [.stream(stream)],
                prepared: true
            )
            guard !rows.rows.isEmpty else { return nil }
            return Snapshot(stream: stream, version: try rows.version(0, 0), payload: try rows.bytes(0, 1))
        }
    }

    /// The names of the streams that have events, in order, at most `limit` of them after `after`: to
    /// list the entities of a store page by page. Each name as the store keeps it, composed (NFC),
    /// whichever spelling it was appended under.
    public func streams(after: String = "", limit: Int = 1_000) async throws -> [String] {
        let table = "\(schema).events"
        return try await reading(after, "list the streams") { connection throws(PostgresError) in
            let rows = try connection.execute(
                "SELECT DISTINCT stream FROM \(table) WHERE stream > $1 ORDER BY stream LIMIT $2",
                [.stream(after), .int(Int64(max(0, limit)))]
            )
            var names: [String] = []
            for row in rows.rows.indices { names.append(try rows.text(row, 0)) }
            return names
        }
    }

    // MARK: Writing

    /// On the writer's queue: commits what is queued, batch after batch, until the queue is empty.
    private func writeQueued() {
        while true {
            // After `close()`, what was queued before it is still written.
            guard let batch = queue.withLock({ $0.commits.nextBatch(limit: Self.appendsPerBatch) }) else { return }
            let results = commit(batch)
            for (pending, result) in zip(batch, results) { pending.continuation.resume(returning: result) }
        }
    }

    /// Writes `batch` in one transaction; each append's result, in order.
    private func commit(_ batch: [PendingAppend]) -> [Result<UInt64, EventStoreError>] {
        let requests = batch.map {
            PostgresBatch.Append(stream: $0.stream, expected: $0.expected, payloads: $0.payloads)
        }
        let schema = self.schema
        batches.add(1, ordering: .relaxed)
        let (inboxRowOf, answersOf) = (self.inboxRowOf, self.answersOf)
        let fencing = self.fencing.withLock { $0 }
        let outcome = writer.runInline { connection throws(PostgresError) in
            try PostgresBatch.commit(
                requests,
                schema: schema,
                inboxRowOf: inboxRowOf,
                answersOf: answersOf,
                fencing: fencing,
                on: connection
            )
        }
        switch outcome {
        case .success(let results):
            if let inboxRowOf, let consumed = consumed.withLock({ $0 }) {
                var rows: [Int64] = []
                for (append, result) in zip(requests, results) {
                    guard case .success = result else { continue }
                    for payload in append.payloads { if let row = inboxRowOf(payload) { rows.append(row) } }
                }
                if !rows.isEmpty { consumed.body(rows) }
            }
            return results
        case .failure(let error) where error.kind == .statement && batch.count > 1:
            // Something in the batch the server refused: each append on its own, so only that one fails.
            return batch.flatMap { commit([$0]) }
        case .failure(let error):
            return batch.map { .failure(Self.storeError(error, doing: "append", stream: $0.stream)) }
        }
    }

    // MARK: Helpers

    private func reading<Value: Sendable>(
        _ stream: String,
        _ operation: String,
        _ body: @escaping @Sendable (PostgresConnection) throws(PostgresError) -> Value
    ) async throws -> Value {
        if queue.withLock({ $0.closed }) { throw Self.closedError(stream) }
        do {
            return try await reader.run(body)
        } catch {
            throw Self.storeError(error, doing: operation, stream: stream)
        }
    }

    /// The largest payload the store takes: PostgreSQL's `bytea` holds up to 1 GB, and a batch's
    /// statement must stay under its 1 GB message limit too.
    static let largestPayload = 256 * 1_024 * 1_024

    /// The longest stream name the store takes, in UTF-8 bytes: names are indexed, and PostgreSQL cannot
    /// index a key past about a third of a page (2,704 bytes).
    public static let maximumStreamBytes = 1_024

    /// Why the store would refuse `payloads` for `stream`, or `nil` if it takes them: a name with a NUL
    /// or longer than ``maximumStreamBytes`` (composed, as the store keeps it), or an event over 256
    /// MiB. The cluster's nodes check inbox rows with it too, so such a row is dead-lettered rather than
    /// failing its batch.
    public static func problem(with payloads: [[UInt8]], stream: String) -> String? {
        if stream.utf8.contains(0) { return "a stream name with a NUL character" }
        // Measured as the database keeps it, composed (which can be longer or shorter).
        let stored = StreamName.canonical(stream).utf8.count
        if stored > maximumStreamBytes {
            return "a stream name of \(stored) bytes, past the limit of \(maximumStreamBytes)"
        }
        if let large = payloads.first(where: { $0.count > largestPayload }) {
            return "an event of \(large.count) bytes, more than the \(largestPayload) bytes the store takes"
        }
        return nil
    }

    static func storeError(_ error: PostgresError, doing operation: String, stream: String? = nil) -> EventStoreError {
        EventStoreError(.unavailable(reason: "cannot \(operation): \(error)"), stream: stream)
    }

    static func closedError(_ stream: String) -> EventStoreError {
        EventStoreError(.unavailable(reason: "the store is closed"), stream: stream)
    }

    static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 63 else { return false }
        let letters = Set("abcdefghijklmnopqrstuvwxyz_".unicodeScalars)
        let digits = Set("0123456789".unicodeScalars)
        return letters.contains(first) && name.unicodeScalars.allSatisfy { letters.contains($0) || digits.contains($0) }
    }
}
