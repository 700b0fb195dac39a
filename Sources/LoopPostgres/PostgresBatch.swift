internal import LoopPersistence

/// An answer (or why there is none) for the caller of a request across the cluster, as its `replies`
/// row holds it.
struct ReplyRow: Sendable, Equatable {
    var stream: String
    var reply: UInt64
    var payload: [UInt8]? = nil
    /// Why the request has no answer: its kind (`keyReused`, `invalid`, `failed`) and a reason.
    var failure: (kind: String, reason: String)? = nil

    init(stream: String, reply: UInt64, payload: [UInt8]? = nil, failure: (kind: String, reason: String)? = nil) {
        self.stream = stream
        self.reply = reply
        self.payload = payload
        self.failure = failure
    }

    /// The row of an answer as recorded: its bytes, or, for one that did not encode, a failure.
    init(stream: String, reply: UInt64, recorded: Result<[UInt8], CodecError>) {
        switch recorded {
        case .success(let bytes): self.init(stream: stream, reply: reply, payload: bytes)
        case .failure(let error):
            self.init(stream: stream, reply: reply, failure: ("failed", "the answer did not encode: \(error)"))
        }
    }

    static func == (lhs: ReplyRow, rhs: ReplyRow) -> Bool {
        lhs.stream == rhs.stream && lhs.reply == rhs.reply && lhs.payload == rhs.payload
            && lhs.failure?.kind == rhs.failure?.kind && lhs.failure?.reason == rhs.failure?.reason
    }
}

/// How one batch of appends is written: a pure plan (which appends pass their version check, which rows
/// to insert) and the transaction that applies it.
enum PostgresBatch {
    /// How a cluster node's appends prove it still owns their streams: while the node's lock connection
    /// holds a shard's lock it also holds a second, its own, keyed `token + shard` (a session advisory
    /// lock on one 64-bit key), taken after the shard's and let go before it; an append checks in its
    /// transaction that this key is held. A shard taken over meanwhile (or whose locks went with a broken
    /// session) fences the appends of its streams; nothing of theirs is written.
    struct Fencing: Sendable, Equatable {
        /// The base of the keys of the locks the node's lock connection holds, one for each shard it holds
        /// (`token + shard`): random for each session of the node, so no other session holds them.
        var token: Int64
        /// The cluster's shard count.
        var shards: Int
    }

    /// One append of the batch.
    struct Append: Sendable {
        var stream: String
        var expected: UInt64
        var payloads: [[UInt8]]
    }

    /// One row to insert.
    struct Row: Equatable {
        var stream: String
        var version: UInt64
        var payload: [UInt8]
        /// The inbox row the event consumed, deleted in the same transaction.
        var inboxRow: Int64? = nil
    }

    /// Checks each append against the streams' versions (`current`, updated as appends pass, so two
    /// appends to one stream in a batch chain) and lists the rows of those that pass, in order.
    static func plan(
        _ appends: [Append],
        current: [[UInt8]: UInt64],
        inboxRowOf: (@Sendable ([UInt8]) -> Int64?)? = nil
    ) -> (results: [Result<UInt64, EventStoreError>], rows: [Row]) {
        var versions = current
        var results: [Result<UInt64, EventStoreError>] = []
        var rows: [Row] = []
        for append in appends {
            // Keyed by the name's bytes: Swift calls canonically equivalent strings equal, PostgreSQL does not.
            let key = Array(append.stream.utf8)
            let actual = versions[key] ?? 0
            guard append.expected == actual else {
                results.append(
                    .failure(
                        EventStoreError(
                            .versionConflict(expected: append.expected, actual: actual),
                            stream: append.stream
                        )
                    )
                )
                continue
            }
            for (offset, payload) in append.payloads.enumerated() {
                rows.append(
                    Row(
                        stream: append.stream,
                        version: actual + 1 + UInt64(offset),
                        payload: payload,
                        inboxRow: inboxRowOf?(payload)
                    )
                )
            }
            let next = actual + UInt64(append.payloads.count)
            versions[key] = next
            results.append(.success(next))
        }
        return (results, rows)
    }

    /// Writes the appends that pass their check in one transaction. A unique violation (another process
    /// committed one of these versions first) rolls it back and checks again, so the appends it does not
    /// concern still commit; after a few such rounds the error is reported.
    static func commit(
        _ appends: [Append],
        schema: String,
        inboxRowOf: (@Sendable ([UInt8]) -> Int64?)? = nil,
        answersOf: (@Sendable ([UInt8]) -> [RecordedAnswer])? = nil,
        fencing: Fencing? = nil,
        on connection: PostgresConnection
    ) throws(PostgresError) -> [Result<UInt64, EventStoreError>] {
        var attempt = 0
        while true {
            attempt += 1
            do throws(PostgresError) {
                // The transaction's checks go in one round trip (libpq's pipeline mode), the writes and the
                // commit in a second: at one statement a round trip, a batch took six, and under load each
                // waited for the server's process to be scheduled.
                // Each stream once, by its name's bytes (canonically equivalent names are two streams to
                // PostgreSQL), in the order the appends name them.
                var streams: [String] = []
                var seen: Set<[UInt8]> = []
                for append in appends where seen.insert(Array(append.stream.utf8)).inserted {
                    streams.append(append.stream)
                }
                // An append carrying an inbox row another writer already consumed repeats a transition
                // someone else made: it conflicts, as a stale version does.
                let asked = versionsStatement(
                    of: streams,
                    consuming: inboxRowOf.map { inboxRowOf in appends.flatMap { $0.payloads.compactMap(inboxRowOf) } }
                        ?? [],
                    schema: schema
                )
                let fences = fencing.map { unownedStatements(streams, fencing: $0, schema: schema) } ?? []
                let checked = try connection.pipeline(
                    [PostgresStatement("BEGIN")] + (asked.map { [$0] } ?? []) + fences
                )
                let (current, consumed) =
                    try asked.map { _ throws(PostgresError) in try versions(in: checked[1]) }
                    ?? ([:], [])
                let fenced = try fences.isEmpty ? [] : unowned(in: checked[checked.count - 1])
                let fresh = appends.map { append in
                    !fenced.contains(Array(append.stream.utf8))
                        && (consumed.isEmpty
                            || !append.payloads.contains { inboxRowOf?($0).map(consumed.contains) ?? false })
                }
                var (results, rows) = plan(
                    appends.indices.filter { fresh[$0] }.map { appends[$0] },
                    current: current,
                    inboxRowOf: inboxRowOf
                )
                if fresh.contains(false) {
                    var merged: [Result<UInt64, EventStoreError>] = []
                    var next = results.makeIterator()
                    for (index, append) in appends.enumerated() {
                        if fresh[index], let result = next.next() {
                            merged.append(result)
                        } else if fenced.contains(Array(append.stream.utf8)) {
                            merged.append(
                                .failure(
                                    EventStoreError(
                                        .fenced(reason: "this node no longer holds the stream's shard"),
                                        stream: append.stream
                                    )
                                )
                            )
                        } else {
                            let actual = current[Array(append.stream.utf8)] ?? 0
                            merged.append(
                                .failure(
                                    EventStoreError(
                                        .versionConflict(expected: append.expected, actual: actual),
                                        stream: append.stream
                                    )
                                )
                            )
                        }
                    }
                    results = merged
                }
                var writes: [PostgresStatement] = []
                if inboxRowOf == nil && answersOf == nil {
                    if !rows.isEmpty { writes.append(insertStatement(rows[...], schema: schema)) }
                } else if !rows.isEmpty {
                    // A cluster's: the events, the inbox rows they consumed and the answers they record,
                    // in one statement.
                    let recorded = answersOf.map { Self.answers(of: rows, answersOf: $0) } ?? []
                    writes.append(
                        PostgresStatement(
                            """
                            WITH appended AS (\(insertion(schema, from: 1))),
                            consumed AS (DELETE FROM \(schema).inbox WHERE id = ANY($5::bigint[])),
                            \(answering(schema, from: 6))
                            """,
                            eventParameters(rows[...]) + [.ints(rows.compactMap(\.inboxRow))]
                                + answerParameters(recorded),
                            prepared: true
                        )
                    )
                }
                // A write that fails skips the commit: the transaction is rolled back below.
                try connection.pipeline(writes + [PostgresStatement("COMMIT")])
                return results
            } catch {
                if error.kind != .connection { _ = try? connection.execute("ROLLBACK") }
                guard (error.isUniqueViolation || error.isRetryable) && attempt < 8 else { throw error }
            }
        }
    }

    /// The longest answer a notification carries itself (hex-encoded); the caller reads a longer one
    /// from its row.
    static let notifiedAnswerBytes = 1_000
    /// The answers to one channel are notified together, `;`-separated, in payloads of about this many
    /// characters: with an answer's at most 2,021, under PostgreSQL's limit of 8,000.
    static let notificationChunk = 5_000

    /// Writes `answers` to the `replies` rows their callers wait on, if they have one still unanswered,
    /// and notifies each caller's channel with the reply addresses and, for an answer of at most
    /// ``notifiedAnswerBytes``, its bytes in hex (`reply hex;reply;...`: one notification for many
    /// answers). In the caller's transaction, if it is in one: the
    /// answers are visible once their events are.
    static func answer(_ answers: [ReplyRow], schema: String, on connection: PostgresConnection) throws(PostgresError) {
        guard !answers.isEmpty else { return }
        try connection.execute("WITH " + answering(schema, from: 1), answerParameters(answers), prepared: true)
    }

    /// The common table expressions and the final `SELECT` of a statement writing answers (see
    /// ``answer(_:schema:on:)``), their parameters numbered from `first` (five, as
    /// ``answerParameters(_:)`` gives them).
    static func answering(_ schema: String, from first: Int) -> String {
        let (streams, replies, payloads, kinds, failures) = (first, first + 1, first + 2, first + 3, first + 4)
        return """
            v AS (
                SELECT * FROM unnest($\(streams)::text[], $\(replies)::bigint[], $\(payloads)::bytea[],
                    $\(kinds)::text[], $\(failures)::text[])
                AS v (stream, reply, payload, kind, failure)
            ),
            a AS (
                UPDATE \(schema).replies r SET payload = v.payload,
                    failure = CASE WHEN v.kind = '' THEN NULL ELSE v.failure END, failure_kind = nullif(v.kind, ''),
                    answered_at = now()
                FROM v WHERE r.stream = v.stream AND r.reply = v.reply AND r.answered_at IS NULL
                    -- Also as an array, so the rows are found by the primary key whatever the plan's estimates.
                    AND r.reply = ANY($\(replies)::bigint[])
                RETURNING r.channel, r.reply, v.payload
            )
            SELECT pg_notify(channel, string_agg(item, ';')) FROM (
                SELECT channel, item,
                    sum(length(item) + 1) OVER (PARTITION BY channel ORDER BY reply ROWS UNBOUNDED PRECEDING)
                        / \(notificationChunk) AS chunk
                FROM (
                    SELECT a.channel, a.reply, a.reply::text || CASE
                        WHEN a.payload IS NOT NULL AND length(a.payload) <= \(notifiedAnswerBytes)
                        THEN ' ' || encode(a.payload, 'hex') ELSE '' END AS item
                    FROM a
                ) items
            ) chunks GROUP BY channel, chunk
            """
    }

    /// The parameters of `answers` for ``answering(_:from:)``.
    static func answerParameters(_ answers: [ReplyRow]) -> [PostgresValue] {
        [
            .texts(answers.map(\.stream)), .ints(answers.map { Int64(bitPattern: $0.reply) }),
            .blobs(answers.map(\.payload)), .texts(answers.map { $0.failure?.kind ?? "" }),
            .texts(answers.map { $0.failure?.reason ?? "" }),
        ]
    }

    /// The answers `rows` record (see ``answer(_:schema:on:)``): an answer that did not encode is
    /// written as a failure.
    static func answers(of rows: [Row], answersOf: @Sendable ([UInt8]) -> [RecordedAnswer]) -> [ReplyRow] {
        var answers: [ReplyRow] = []
        for row in rows {
            for answer in answersOf(row.payload) {
                answers.append(ReplyRow(stream: row.stream, reply: answer.reply, recorded: answer.payload))
            }
        }
        return answers
    }

    /// The statements that find which of `streams` (each once) are in shards whose key
    /// `fencing.token + shard` no session holds. The first takes a shared transaction lock on each shard's
    /// fence, so a node taking one of them over (which takes the fence's exclusive lock once it holds the
    /// shard) waits for this transaction.
    ///
    /// A try for a shared lock on the key fails exactly while a session holds it, which only the node's
    /// lock connection ever does: the check costs a lock try for each stream. It once read `pg_locks`
    /// for the shard lock's holder, which copies the server's whole lock tables (4% of all the processor
    /// time in w14, `Docs/Performance.md`). A try that succeeds holds the key shared until this
    /// transaction ends: the node's lock connection, taking the shard again, waits for it.
    ///
    /// In order: the fences' locks, then the keys' tries, whose rows ``unowned(in:)`` reads.
    static func unownedStatements(_ streams: [String], fencing: Fencing, schema: String) -> [PostgresStatement] {
        let parameters: [PostgresValue] = [.int(Int64(fencing.shards)), .text(schema), .texts(streams)]
        let named =
            "WITH s AS (SELECT v.stream, \(schema).shard_of(v.stream, $1::integer) AS shard "
            + "FROM unnest($3::text[]) AS v (stream))"
        return [
            PostgresStatement(
                named + " SELECT pg_advisory_xact_lock_shared(hashtext($2 || '.fence'), shard) "
                    + "FROM (SELECT DISTINCT shard FROM s ORDER BY shard) d",
                parameters,
                prepared: true
            ),
            PostgresStatement(
                named + " SELECT s.stream FROM s WHERE pg_try_advisory_xact_lock_shared($4::bigint + s.shard)",
                parameters + [.int(fencing.token)],
                prepared: true
            ),
        ]
    }

    /// The streams (by their names' bytes) the keys' tries of ``unownedStatements(_:fencing:schema:)``
    /// found unowned, from its rows.
    static func unowned(in rows: PostgresRows) throws(PostgresError) -> Set<[UInt8]> {
        var unowned: Set<[UInt8]> = []
        for row in rows.rows.indices { unowned.insert(Array(try rows.text(row, 0).utf8)) }
        return unowned
    }

    /// The current version of each of `streams` (each once; 0 for one with no events), and which of the inbox
    /// rows `inboxRows` an event already consumed: one statement, whose rows ``versions(in:)`` reads;
    /// `nil` when there is nothing to ask.
    static func versionsStatement(
        of streams: [String],
        consuming inboxRows: [Int64],
        schema: String
    )
        -> PostgresStatement?
    {
        guard !streams.isEmpty || !inboxRows.isEmpty else { return nil }
        return PostgresStatement(
            """
            SELECT v.stream, coalesce((SELECT max(e.version) FROM \(schema).events e WHERE e.stream = v.stream), 0)::bigint
            FROM unnest($1::text[]) AS v (stream)
            UNION ALL
            SELECT NULL, inbox_id FROM \(schema).events WHERE inbox_id = ANY($2::bigint[])
            """,
            [.texts(streams), .ints(inboxRows)],
            prepared: true
        )
    }

    /// The versions and the consumed inbox rows the rows of ``versionsStatement(of:consuming:schema:)`` say.
    static func versions(
        in rows: PostgresRows
    ) throws(PostgresError)
        -> (versions: [[UInt8]: UInt64], consumed: Set<Int64>)
    {
        var versions: [[UInt8]: UInt64] = [:]
        var consumed: Set<Int64> = []
        for row in rows.rows.indices {
            if rows.rows[row][0] == nil {
                consumed.insert(try rows.int(row, 1))
            } else {
                versions[Array(try rows.text(row, 0).utf8)] = try rows.version(row, 1)
            }
        }
        return (versions, consumed)
    }

    /// The statement inserting `rows`.
    static func insertStatement(_ rows: ArraySlice<Row>, schema: String) -> PostgresStatement {
        PostgresStatement(insertion(schema, from: 1), eventParameters(rows), prepared: true)
    }

    /// The `INSERT` of events, its parameters numbered from `first` (four, as ``eventParameters(_:)``
    /// gives them).
    static func insertion(_ schema: String, from first: Int) -> String {
        """
        INSERT INTO \(schema).events (stream, version, payload, inbox_id)
        SELECT stream, version, payload, nullif(inbox, -1)
        FROM unnest($\(first)::text[], $\(first + 1)::bigint[], $\(first + 2)::bytea[], $\(first + 3)::bigint[])
            AS r (stream, version, payload, inbox)
        """
    }

    /// The parameters of `rows` for ``insertion(_:from:)``.
    static func eventParameters(_ rows: ArraySlice<Row>) -> [PostgresValue] {
        [
            .texts(rows.map(\.stream)), .ints(rows.map { Int64(clamping: $0.version) }), .blobs(rows.map(\.payload)),
            .ints(rows.map { $0.inboxRow ?? -1 }),
        ]
    }
}

/// The keys a cluster node's lock session holds beside its shards' locks, which its appends check
/// (`PostgresBatch.Fencing`): `token + shard`, with a random token for each session whose low 16 bits
/// are clear, so a key's low bits are its shard.
package enum ShardKeys {
    /// Once the node holds `shard`'s lock, before its fence: waits until no other node's lock session holds
    /// its key for the shard (`PostgresBatch.Fencing`). A session that ends lets its locks go one part
    /// of the server's lock table at a time, so the shard's lock can be free while the key is still held,
    /// for as long as the ending backend is held up; an append of that node meanwhile would pass its
    /// check after the fence was awaited. Throws after `attempts` tries 10 ms apart (10 s): the caller
    /// then leaves the shard.
    package static func awaitOthersGone(
        of shard: Int,
        attempts: Int = 1_000,
        on connection: PostgresConnection
    ) throws(PostgresError) {
        for _ in 0..<attempts {
            let held = try connection.execute(
                """
                SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid <> pg_backend_pid()
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.objid::bigint % 65536 = $1 AND a.application_name LIKE 'effectloop node %'
                """,
                [.int(Int64(shard))]
            )
            if try held.int(0, 0) == 0 { return }
            try connection.execute("SELECT pg_sleep(0.01)")
        }
        throw PostgresError(.statement, message: "another node's lock session still holds its key for shard \(shard)")
    }
}
