internal import Dispatch
public import LoopCore
public import LoopPersistence
public import LoopRuntime
internal import Synchronization

// The client's bookkeeping does not depend on its event type: kept outside the generic class, its code
// is compiled for these types once (a type nested in a generic class is generic, and each use of it
// looks its metadata up at run time).

/// What a ``ClusterClient`` waits for, changed under its lock.
private struct ClientWaiting {
    /// The callers waiting, by reply address: almost always one each, several for repeats of a key
    /// made at once.
    var callers: [UInt64: [ClientCaller]] = [:]
    /// Callers whose task was cancelled before they were registered.
    var cancelledEarly: Set<UInt64> = []
    /// Requests to insert, in order, for the writer's next batch.
    var outbox: [ClientOutgoing] = []
    var writing = false
    var listening = false
    var closed = false
    /// When the listener next has something to do besides reading notifications (a deadline, a poll of
    /// an answer not notified), at the earliest: its turns skip looking at every caller until then.
    var nextLook: ContinuousClock.Instant?
}

/// A request waiting for its answer.
private struct ClientCaller {
    var id: UInt64
    var stream: String
    var key: String
    var timeout: Duration
    var deadline: ContinuousClock.Instant
    /// When the client last read (or started to wait for) its answer.
    var looked: ContinuousClock.Instant
    var continuation: CheckedContinuation<Result<[UInt8], RequestError>, Never>
}

/// A request to insert.
private struct ClientOutgoing: Sendable {
    var caller: UInt64
    var stream: String
    var key: String
    var reply: UInt64
    var digest: UInt64
    var payload: [UInt8]
}

/// Asks a cluster's entities from any process with a connection to its database: a request is an inbox
/// row carrying its key and reply address; the node that owns the entity records the event and writes
/// the answer in the same transaction (the reply only once its event is durable), and notifies this
/// client's channel.
///
/// ```swift
/// let accounts = try await ClusterClient(connecting: conninfo, events: JSONCodec<Account.Event>())
/// let outcome: Outcome = try await accounts.request(to: "account-17", key: requestID) {
///     .withdraw(50, replyTo: $0)
/// }
/// ```
///
/// - **Once.** A request's key is recorded with its event by the entity (see
///   ``/LoopPersistence/KeyWindow``): a repeat of the key, after a timeout, a failover or a restart of
///   this process, is not applied again and gets the first try's answer, from the `replies` table if it
///   is still there (see ``ClusterNode/Configuration/answersKept``), or from the entity's record. Past
///   both (the table let it go and the key left the entity's window) a repeat is a new request. Without
///   a key, the client makes one: the request is then not one a retry can repeat.
/// - **Waking.** The client listens on its own channel; each answer's commit notifies the channel of
///   the last process that asked (two processes asking one key at once: the other reads it within a
///   second), carrying the answer itself when it is short. A notification missed (the client's
///   connection broke) is made up for by reading the answers it waits for, once a second.
/// - **Timeouts.** A request's timeout is kept to within about 50 ms.
/// - **Answers.** The program decides them as for a request in the process
///   (``/LoopPersistence/DurableProgram/replying(_:)``); the client decodes them with the same codec as
///   the program records them with.
public final class ClusterClient<Event: Sendable>: Sendable {
    private let writer: PostgresWorker
    private let listener: PostgresWorker
    private let schema: String
    private let events: any EventCodec<Event>
    /// The channel this client listens on: `effectloop_reply_` and 16 random hex digits (33 bytes,
    /// whatever the schema's name: PostgreSQL refuses to notify a channel of 64 bytes or more).
    private let channel: String
    // `Locked`, not `Synchronization.Mutex`: the thread sanitizer sees a `pthread_mutex_t`, not Mutex's lock.
    private let state = Locked(ClientWaiting())
    /// How long a request waits for a notification before the client reads its answer itself.
    private let pollInterval: Duration

    /// Connects to the database `conninfo` names, installs or upgrades the schema (as
    /// ``PostgresEventStore/init(connecting:schema:retention:)`` does) and starts listening for answers.
    ///
    /// - Parameters:
    ///   - conninfo: the database (`host=... dbname=...`).
    ///   - events: the cluster's event codec (the one its nodes decode the inbox with).
    ///   - schema: the cluster's schema.
    /// - Throws: ``/LoopPersistence/EventStoreError`` when the database cannot be reached, the schema
    ///   name is not a plain identifier, or the schema cannot be installed.
    public convenience init(
        connecting conninfo: String,
        events: some EventCodec<Event>,
        schema: String = "effectloop"
    ) async throws {
        try await self.init(connecting: conninfo, events: events, schema: schema, installing: true)
    }

    /// Connects; installs the schema only if `installing` (a node's own client finds it installed).
    init(
        connecting conninfo: String,
        events: any EventCodec<Event>,
        schema: String,
        installing: Bool,
        pollInterval: Duration = .seconds(1)
    ) async throws {
        guard PostgresEventStore.isIdentifier(schema) else {
            throw EventStoreError(.invalid(reason: "schema name '\(schema)' is not a plain SQL identifier"))
        }
        self.schema = schema
        self.events = events
        self.pollInterval = pollInterval
        channel = "effectloop_reply_" + String(UInt64.random(in: 1...UInt64.max), radix: 16)
        // A request's rows need not wait for the server's log to reach the disk: one a crash of the
        // database loses was never answered, so its caller times out and repeats the key, as it would
        // have if the request had been lost on the way. The answer is durable: the owner's append
        // waits for the disk.
        writer = PostgresWorker(
            conninfo,
            label: "effectloop.client.writer",
            applicationName: "effectloop client",
            setup: [keyedLookupsOnly, "SET synchronous_commit = off"]
        )
        listener = PostgresWorker(
            conninfo,
            label: "effectloop.client.listener",
            applicationName: "effectloop client",
            setup: [keyedLookupsOnly]
        )
        do {
            if installing {
                try await writer.run { [schema] connection throws(PostgresError) in
                    try PostgresSchema.install(schema, on: connection)
                }
            }
            // Listening before the first request is sent, so no answer comes before the client hears.
            _ = try await listener.run { [channel] connection throws(PostgresError) in
                try connection.listen(to: channel)
            }
        } catch {
            await writer.close()
            await listener.close()
            throw PostgresEventStore.storeError(error, doing: "connect a cluster client")
        }
    }

    /// Sends the event `make` builds around a reply address to the entity `entity` (its stream's name),
    /// wherever in the cluster it runs, and waits for the answer its program decides, released once the
    /// event that decided it is recorded. The answer is decoded with `answers`, the codec the program
    /// records its answers with (``/LoopPersistence/DurableProgram/replying(_:codec:)``).
    ///
    /// `make` is called twice (once with a placeholder address, for the event's digest): it must build
    /// the same event from the same address. A repeat of `key` with another event is refused. The
    /// entity's name and the key are compared as Swift compares strings (two spellings of one text are
    /// one entity, one key): both are sent composed (NFC).
    ///
    /// - Throws: ``/LoopRuntime/RequestError/timedOut(after:)`` when no answer came within `timeout`
    ///   (the request may still be applied: repeat the key to learn its answer);
    ///   ``/LoopRuntime/RequestError/storeFailed(_:)`` when the request could not be sent (it may or
    ///   may not be stored: repeat the key), or its answer does not decode;
    ///   ``/LoopRuntime/RequestError/keyReused(_:)`` when the entity recorded the key with another event;
    ///   ``/LoopRuntime/RequestError/invalid(_:)`` for a key, a stream name or an event that cannot be
    ///   sent, or a request the entity cannot process (its row went to `inbox_dead`, with why);
    ///   ``/LoopRuntime/RequestError/cancelled`` when the waiting task is cancelled;
    ///   ``/LoopRuntime/RequestError/rejected(_:)`` once the client is closed.
    public func request<Value: Sendable>(
        to entity: String,
        key: String? = nil,
        timeout: Duration = .seconds(30),
        answers: some EventCodec<Value>,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await ask(to: entity, key: key, timeout: timeout, make: make) { bytes in
            do {
                return .success(try answers.decode(bytes))
            } catch {
                return .failure(.storeFailed("the answer does not decode: \(error)"))
            }
        }
    }

    /// ``request(to:key:timeout:answers:_:)`` for a program whose answers are recorded in
    /// ``/LoopPersistence/BinaryCodec``'s form (``/LoopPersistence/DurableProgram/replying(_:)``).
    public func request<Value: Codable & Sendable>(
        to entity: String,
        key: String? = nil,
        timeout: Duration = .seconds(30),
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await request(to: entity, key: key, timeout: timeout, answers: BinaryCodec<Value>(), make)
    }

    /// Stops listening and closes the connections; callers still waiting get
    /// ``/LoopRuntime/RequestError/rejected(_:)``.
    public func close() async {
        let waiting = state.withLock { state in
            state.closed = true
            // Requests not yet sent are not sent: their callers are refused, and nothing of them applied.
            state.outbox = []
            defer { state.callers = [:] }
            return state.callers.values.flatMap { $0 }
        }
        for caller in waiting { caller.continuation.resume(returning: .failure(.rejected(.stopped))) }
        await writer.close()
        await listener.close()
    }

    /// The request, with its answer decoded by `decode`.
    func ask<Value: Sendable>(
        to entity: String,
        key: String?,
        timeout: Duration,
        make: (ReplyTo<Value>) -> Event,
        decode: @escaping @Sendable ([UInt8]) -> Result<Value, RequestError>
    ) async throws(RequestError) -> Value {
        if Task.isCancelled { throw .cancelled }
        // As the database keeps them: two spellings of one name (or key) are one entity (one request).
        let entity = StreamName.canonical(entity)
        let asked = key.map(StreamName.canonical)
        if let key = asked, let problem = KeyLimits.problem(with: key) { throw .invalid(problem) }
        // PostgreSQL's text holds no NUL: such a key would fail the statement of every request sent with it.
        if let key = asked, key.utf8.contains(0) { throw .invalid("a key with a NUL character") }
        let key = asked ?? "effectloop-" + String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let outgoing: ClientOutgoing
        do {
            let placeholder = try events.encode(make(ReplyTo(id: 0)))
            let (reply, digest) = requestAddress(stream: entity, key: key, placeholder: placeholder)
            let payload = try events.encode(make(ReplyTo(id: reply)))
            outgoing = ClientOutgoing(
                caller: 0,
                stream: entity,
                key: key,
                reply: reply,
                digest: digest,
                payload: payload
            )
        } catch {
            throw .invalid("the event does not encode: \(error)")
        }
        if let problem = PostgresEventStore.problem(with: [outgoing.payload], stream: entity) {
            throw .invalid(problem)
        }
        let id = callerNumbers.add(1, ordering: .relaxed).newValue
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<[UInt8], RequestError>, Never>) in
                let now = ContinuousClock.now
                let caller = ClientCaller(
                    id: id,
                    stream: entity,
                    key: key,
                    timeout: timeout,
                    deadline: now + timeout,
                    looked: now,
                    continuation: continuation
                )
                var sent = outgoing
                sent.caller = id
                let (refusal, write, listen) = state.withLock { state -> (RequestError?, Bool, Bool) in
                    if state.closed { return (.rejected(.stopped), false, false) }
                    if state.cancelledEarly.remove(id) != nil { return (.cancelled, false, false) }
                    state.callers[sent.reply, default: []].append(caller)
                    let look = min(caller.deadline, caller.looked + pollInterval)
                    state.nextLook = min(state.nextLook ?? look, look)
                    state.outbox.append(sent)
                    let write = !state.writing
                    let listen = !state.listening
                    state.writing = true
                    state.listening = true
                    return (nil, write, listen)
                }
                if let refusal {
                    continuation.resume(returning: .failure(refusal))
                    return
                }
                if write { writer.schedule { self.write() } }
                if listen { listener.schedule { self.listen() } }
            }
        } onCancel: {
            let cancelled = state.withLock { state -> ClientCaller? in
                guard let reply = state.callers.first(where: { $0.value.contains { $0.id == id } })?.key,
                    let index = state.callers[reply]?.firstIndex(where: { $0.id == id })
                else {
                    state.cancelledEarly.insert(id)
                    return nil
                }
                let caller = state.callers[reply]?.remove(at: index)
                if state.callers[reply]?.isEmpty == true { state.callers[reply] = nil }
                // Not sent yet: it is not sent.
                state.outbox.removeAll { $0.caller == id }
                return caller
            }
            cancelled?.continuation.resume(returning: .failure(.cancelled))
        }
        switch outcome {
        case .success(let bytes): return try decode(bytes).get()
        case .failure(let error): throw error
        }
    }

    // MARK: On the writer's queue

    /// Inserts the requests waiting to be sent, a batch at a time, until none waits: each batch is one
    /// statement, which records (or finds) each request's `replies` row and inserts the inbox rows of
    /// those not answered yet; the answered ones are answered at once.
    private func write() {
        while true {
            let batch = state.withLock { state -> [ClientOutgoing] in
                // At most 1,000 requests, and at most 64 MiB of events (PostgreSQL takes at most 1 GB in
                // one parameter), but at least one.
                var count = 0
                var bytes = 0
                while count < min(state.outbox.count, 1_000) {
                    bytes += state.outbox[count].payload.count
                    if count > 0 && bytes > 64 << 20 { break }
                    count += 1
                }
                let batch = Array(state.outbox.prefix(count))
                state.outbox.removeFirst(batch.count)
                if batch.isEmpty { state.writing = false }
                return batch
            }
            guard !batch.isEmpty else { return }
            // One row per reply address: repeats of a key sent together wait on the same answer.
            var seen: Set<[UInt8]> = []
            let unique = batch.filter { seen.insert(Array("\($0.reply) \($0.stream)".utf8)).inserted }
            let (schema, channel) = (self.schema, self.channel)
            var outcome = insert(unique, schema: schema, channel: channel)
            // A connection that broke (the database restarted, the session was ended) is made anew:
            // the statement is tried once more. Sending a request twice is harmless: the entity applies
            // its key once.
            if case .failure(let error) = outcome, error.kind == .connection {
                outcome = insert(unique, schema: schema, channel: channel)
            }
            switch outcome {
            case .success(let answered):
                resolve(answered)
            case .failure(let error):
                let failed = state.withLock { state -> [ClientCaller] in
                    var failed: [ClientCaller] = []
                    for request in batch {
                        guard let callers = state.callers[request.reply],
                            let index = callers.firstIndex(where: { $0.id == request.caller })
                        else { continue }
                        failed.append(callers[index])
                        state.callers[request.reply]?.remove(at: index)
                        if state.callers[request.reply]?.isEmpty == true { state.callers[request.reply] = nil }
                    }
                    return failed
                }
                let reason = RequestError.storeFailed("the request could not be sent (it may have been): \(error)")
                for caller in failed { caller.continuation.resume(returning: .failure(reason)) }
            }
        }
    }

    /// Records (or finds) the `replies` row of each of `requests` and inserts the inbox rows of those not
    /// answered yet, in one statement; returns the rows of those answered already.
    private func insert(
        _ requests: [ClientOutgoing],
        schema: String,
        channel: String
    ) -> Result<[ReplyRow], PostgresError> {
        writer.runInline { connection throws(PostgresError) -> [ReplyRow] in
            let rows = try connection.execute(
                """
                WITH v AS (
                    SELECT * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[])
                    WITH ORDINALITY AS v (stream, reply, digest, key, payload, position)
                ),
                r AS (
                    INSERT INTO \(schema).replies (stream, reply, channel) SELECT stream, reply, $1 FROM v
                    ON CONFLICT (stream, reply) DO UPDATE SET channel = excluded.channel,
                        -- Asked again while unanswered: kept as long again.
                        asked_at = CASE WHEN replies.answered_at IS NULL THEN now() ELSE replies.asked_at END
                    RETURNING stream, reply, answered_at IS NOT NULL AS answered, payload, failure_kind, failure
                ),
                i AS (
                    INSERT INTO \(schema).inbox (stream, payload, key, reply, digest)
                    SELECT v.stream, v.payload, v.key, v.reply, v.digest FROM v
                    JOIN r ON r.stream = v.stream AND r.reply = v.reply
                    WHERE NOT r.answered ORDER BY v.position
                )
                SELECT stream, reply, payload, failure_kind, failure FROM r WHERE answered
                """,
                [
                    .text(channel), .texts(requests.map { $0.stream }),
                    .ints(requests.map { Int64(bitPattern: $0.reply) }),
                    .ints(requests.map { Int64(bitPattern: $0.digest) }), .texts(requests.map { $0.key }),
                    .blobs(requests.map { $0.payload }),
                ],
                prepared: true
            )
            return try Self.replyRows(rows)
        }
    }

    /// The `replies` rows of a statement returning stream, reply, payload, failure kind and failure.
    private static func replyRows(_ rows: PostgresRows) throws(PostgresError) -> [ReplyRow] {
        var found: [ReplyRow] = []
        for index in rows.rows.indices {
            var row = ReplyRow(stream: try rows.text(index, 0), reply: UInt64(bitPattern: try rows.int(index, 1)))
            if rows.rows[index][2] != nil { row.payload = try rows.bytes(index, 2) }
            if rows.rows[index][3] != nil {
                row.failure = (try rows.text(index, 3), rows.rows[index][4] == nil ? "" : try rows.text(index, 4))
            }
            found.append(row)
        }
        return found
    }

    /// Hands each answer to the callers waiting for its address in its stream.
    private func resolve(_ answers: [ReplyRow]) {
        guard !answers.isEmpty else { return }
        let resolved = state.withLock { state -> [(ClientCaller, ReplyRow)] in
            var resolved: [(ClientCaller, ReplyRow)] = []
            for answer in answers {
                guard let callers = state.callers[answer.reply] else { continue }
                let (mine, others) = (
                    callers.filter { $0.stream == answer.stream }, callers.filter { $0.stream != answer.stream }
                )
                state.callers[answer.reply] = others.isEmpty ? nil : others
                resolved += mine.map { ($0, answer) }
            }
            return resolved
        }
        for (caller, answer) in resolved {
            let outcome: Result<[UInt8], RequestError>
            if let payload = answer.payload {
                outcome = .success(payload)
            } else {
                let (kind, reason) = answer.failure ?? ("failed", "the answer is missing")
                let error: RequestError =
                    switch kind {
                    case "keyReused": .keyReused(caller.key)
                    case "invalid": .invalid(reason)
                    default: .storeFailed(reason)
                    }
                outcome = .failure(error)
            }
            caller.continuation.resume(returning: outcome)
        }
    }

    // MARK: On the listener's queue

    /// One turn of the listener, while callers wait: hands over the answers notified (reading those too
    /// long to be carried), reads the answers of callers that waited a poll interval without one, ends
    /// the waits past their deadline, and schedules the next turn; once nobody waits, it stops.
    private func listen() {
        let now = ContinuousClock.now
        let (expired, next, due) = state.withLock {
            state -> ([ClientCaller], ContinuousClock.Instant?, [(String, UInt64)]) in
            // Nothing is due before `nextLook`: this turn only reads notifications.
            if let nextLook = state.nextLook, now < nextLook, !state.callers.isEmpty, !state.closed {
                return ([], nextLook, [])
            }
            var expired: [ClientCaller] = []
            var next: ContinuousClock.Instant?
            var due: [(String, UInt64)] = []
            for (reply, callers) in state.callers {
                if callers.contains(where: { $0.deadline <= now }) {
                    expired += callers.filter { $0.deadline <= now }
                    let waiting = callers.filter { $0.deadline > now }
                    state.callers[reply] = waiting.isEmpty ? nil : waiting
                }
                guard let waiting = state.callers[reply] else { continue }
                for index in waiting.indices {
                    var looked = waiting[index].looked
                    if now - looked >= pollInterval {
                        due.append((waiting[index].stream, reply))
                        looked = now
                        state.callers[reply]?[index].looked = now
                    }
                    next = min(next ?? waiting[index].deadline, waiting[index].deadline, looked + pollInterval)
                }
            }
            state.nextLook = next
            if state.callers.isEmpty || state.closed { state.listening = false }
            return (expired, state.listening ? next : nil, due)
        }
        for caller in expired { caller.continuation.resume(returning: .failure(.timedOut(after: caller.timeout))) }
        guard let next else { return }
        // At most 50 ms: a caller registered meanwhile with an earlier deadline is not late by more.
        let until = min(next, now + pollInterval, now + .milliseconds(50))
        let milliseconds = Int32(clamping: max(1, (until - now).wholeMilliseconds))
        let (schema, channel) = (self.schema, self.channel)
        let outcome = listener.runInline { connection throws(PostgresError) -> [ReplyRow] in
            // A connection made anew (the last one broke) listens from now on: what was notified before
            // is read from the table, for every caller.
            var read = due
            if try connection.listen(to: channel) {
                read = state.withLock { state in
                    state.callers.flatMap { reply, callers in callers.map { ($0.stream, reply) } }
                }
            }
            var answers: [ReplyRow] = []
            let notified = try connection.notifications(waitingUpTo: read.isEmpty ? milliseconds : 0)
            for item in notified.lazy.filter({ $0.channel == channel }).flatMap({ $0.payload.split(separator: ";") }) {
                let parts = item.split(separator: " ", maxSplits: 1)
                guard let first = parts.first, let address = Int64(first) else { continue }
                let reply = UInt64(bitPattern: address)
                if parts.count == 2, let bytes = Self.bytes(hex: parts[1]) {
                    let streams = state.withLock { state in Set((state.callers[reply] ?? []).map { $0.stream }) }
                    answers += streams.map { ReplyRow(stream: $0, reply: reply, payload: bytes) }
                } else {
                    read += state.withLock { state in (state.callers[reply] ?? []).map { ($0.stream, reply) } }
                }
            }
            if !read.isEmpty { answers += try Self.answered(read, schema: schema, on: connection) }
            return answers
        }
        switch outcome {
        case .success(let answers):
            resolve(answers)
        case .failure:
            // The connection broke: it is made anew at the next turn (and listens again); until the
            // database answers, callers wait for their deadlines.
            listener.schedule(after: .milliseconds(50)) { self.listen() }
            return
        }
        listener.schedule { self.listen() }
    }

    /// The answers recorded for `requests` (stream and reply address), if any.
    private static func answered(
        _ requests: [(String, UInt64)],
        schema: String,
        on connection: PostgresConnection
    ) throws(PostgresError) -> [ReplyRow] {
        let rows = try connection.execute(
            """
            SELECT r.stream, r.reply, r.payload, r.failure_kind, r.failure FROM \(schema).replies r
            JOIN unnest($1::text[], $2::bigint[]) AS v (stream, reply) ON r.stream = v.stream AND r.reply = v.reply
            WHERE r.answered_at IS NOT NULL AND r.reply = ANY($2::bigint[])
            """,
            [.texts(requests.map(\.0)), .ints(requests.map { Int64(bitPattern: $0.1) })],
            prepared: true
        )
        return try replyRows(rows)
    }

    /// The bytes `hex` spells, or `nil` if it is not hex.
    private static func bytes(hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}

/// The numbers of a process's cluster callers.
private let callerNumbers = Atomic<UInt64>(0)

/// A request from the inbox, as its entity's group sees its caller: passes what becomes of the reply
/// address to the node's session, which writes it where the caller (in another process) reads it.
final class ForwardedRequest: AnswerWaiter {
    /// What became of the request.
    enum Outcome {
        /// Answered: by the append that recorded the answer (`nil`), or, for a repeat of the key, from
        /// the record (its bytes, or why they did not encode).
        case answered(recorded: Result<[UInt8], CodecError>?)
        /// The wait ended without an answer.
        case failed(RequestError)
    }

    let row: Int64
    let stream: String
    let key: String
    let reply: UInt64
    private let done: @Sendable (ForwardedRequest, Outcome) -> Void
    private let ended = Atomic<Bool>(false)

    init(
        row: Int64,
        stream: String,
        key: String,
        reply: UInt64,
        done: @escaping @Sendable (ForwardedRequest, Outcome) -> Void
    ) {
        self.row = row
        self.stream = stream
        self.key = key
        self.reply = reply
        self.done = done
    }

    func resolve(_ delivery: ReplyDelivery) -> Bool {
        guard !ended.exchange(true, ordering: .acquiringAndReleasing) else { return false }
        done(self, .answered(recorded: delivery.recorded))
        return true
    }

    func fail(_ error: RequestError) {
        guard !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
        done(self, .failed(error))
    }
}
