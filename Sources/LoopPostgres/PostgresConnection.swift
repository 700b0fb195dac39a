internal import CLibPQ

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// A value bound to a statement's `$n` parameter, sent in PostgreSQL's binary format.
package enum PostgresValue: Sendable, Hashable {
    /// `text`.
    case text(String)
    /// `bigint`.
    case int(Int64)
    /// `bytea`.
    case bytes([UInt8])
    /// SQL `NULL`.
    case null
    /// `text[]`: one parameter for many values, so a statement's text (and its plan) does not change
    /// with how many there are.
    case texts([String])
    /// `bigint[]`.
    case ints([Int64])
    /// `bytea[]`, with SQL `NULL` for `nil`.
    case blobs([[UInt8]?])

    /// The type's object id and the value in PostgreSQL's binary format (`nil` for `NULL`).
    var binary: (type: UInt32, bytes: [UInt8]?) {
        switch self {
        case .text(let text): (25, Array(text.utf8))
        case .int(let value): (20, Self.bigEndian(value))
        case .bytes(let bytes): (17, bytes)
        case .null: (0, nil)
        case .texts(let texts): (1009, Self.array(texts.map { Array($0.utf8) }, of: 25))
        case .ints(let values): (1016, Self.array(values.map(Self.bigEndian), of: 20))
        case .blobs(let blobs): (1001, Self.array(blobs, of: 17))
        }
    }

    private static func bigEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    private static func bigEndian(_ value: Int32) -> [UInt8] {
        (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }
    }

    /// A one-dimensional array of `elements` (of the type `element`) in binary format: dimensions, a
    /// null flag, the element type, the size and lower bound, then each element's length and bytes.
    private static func array(_ elements: [[UInt8]?], of element: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + elements.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        bytes += bigEndian(Int32(elements.isEmpty ? 0 : 1))
        bytes += bigEndian(Int32(elements.contains { $0 == nil } ? 1 : 0))
        bytes += bigEndian(Int32(bitPattern: element))
        if !elements.isEmpty {
            bytes += bigEndian(Int32(clamping: elements.count))
            bytes += bigEndian(Int32(1))
        }
        for element in elements {
            guard let element else {
                bytes += bigEndian(Int32(-1))
                continue
            }
            bytes += bigEndian(Int32(clamping: element.count))
            bytes += element
        }
        return bytes
    }
}

/// The rows a statement returned, each cell as the server sent it in binary format (`nil` for NULL).
package struct PostgresRows: Sendable {
    /// The rows, each a list of cells in column order.
    package var rows: [[[UInt8]?]]
    /// How many rows the statement changed, for an INSERT, UPDATE or DELETE.
    package var affected: Int

    /// The cell at `row`, `column` as a `bigint`; a protocol violation if it is not 8 bytes.
    package func int(_ row: Int, _ column: Int) throws(PostgresError) -> Int64 {
        guard rows.indices.contains(row), rows[row].indices.contains(column), let cell = rows[row][column],
            cell.count == 8
        else {
            throw PostgresError(.protocolViolation, message: "expected a bigint at row \(row), column \(column)")
        }
        return cell.reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }

    /// The cell at `row`, `column` as a version (a `bigint` that must not be negative).
    package func version(_ row: Int, _ column: Int) throws(PostgresError) -> UInt64 {
        let value = try int(row, column)
        guard let version = UInt64(exactly: value) else {
            throw PostgresError(.protocolViolation, message: "a negative version (\(value)) at row \(row)")
        }
        return version
    }

    /// The cell at `row`, `column` as text.
    package func text(_ row: Int, _ column: Int) throws(PostgresError) -> String {
        guard rows.indices.contains(row), rows[row].indices.contains(column), let cell = rows[row][column] else {
            throw PostgresError(.protocolViolation, message: "expected text at row \(row), column \(column)")
        }
        return String(decoding: cell, as: UTF8.self)
    }

    /// The cell at `row`, `column` as bytes (`bytea`).
    package func bytes(_ row: Int, _ column: Int) throws(PostgresError) -> [UInt8] {
        guard rows.indices.contains(row), rows[row].indices.contains(column), let cell = rows[row][column] else {
            throw PostgresError(.protocolViolation, message: "expected bytes at row \(row), column \(column)")
        }
        return cell
    }
}

/// One statement of a ``PostgresConnection/pipeline(_:)``: its text, its parameters, and whether it is
/// prepared once on the connection (see ``PostgresConnection/execute(_:_:prepared:)``).
package struct PostgresStatement {
    package var sql: String
    package var parameters: [PostgresValue]
    package var prepared: Bool

    package init(_ sql: String, _ parameters: [PostgresValue] = [], prepared: Bool = false) {
        self.sql = sql
        self.parameters = parameters
        self.prepared = prepared
    }
}

/// One libpq connection. Not thread-safe, like libpq's own: its owner uses it from one thread at a
/// time (the stores run it on a serial queue of their own). Every call blocks until the server answers.
package final class PostgresConnection {
    private var connection: OpaquePointer?
    /// The statements prepared on this connection (see ``execute(_:_:prepared:)``), by their text.
    private var prepared: [String: String] = [:]
    /// The connection string it was opened with.
    package let conninfo: String

    /// Connects with `conninfo` (`host=/tmp/pg dbname=app`, or a `postgresql://` URL); the server shows
    /// the connection as `applicationName` (in `pg_stat_activity`) unless `conninfo` names one.
    package init(_ conninfo: String, applicationName: String? = nil) throws(PostgresError) {
        self.conninfo = conninfo
        // Defaults first, then the caller's conninfo (expanded from `dbname`), whose settings win: a server
        // that does not answer the connection in 10 s, or a peer gone silent for about a minute, is an
        // error rather than a hang. Last, and so over the conninfo and `PGCLIENTENCODING`: text is sent
        // and read as UTF-8, which is what a Swift string's bytes are; in another client encoding the
        // server would take them for other characters and store a name other processes do not spell so.
        let keywords = [
            "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
            "application_name", "dbname", "client_encoding",
        ]
        let values = ["10", "1", "30", "10", "3", applicationName ?? "effectloop", conninfo, "UTF8"]
        let connection = Self.withCStrings(keywords) { keywords in
            Self.withCStrings(values) { values in PQconnectdbParams(keywords, values, 1) }
        }
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { Self.message(of: $0) } ?? "out of memory"
            PQfinish(connection)
            throw PostgresError(.connection, message: message)
        }
        self.connection = connection
        // Notices (such as "relation already exists, skipping") are not errors: keep them off stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit {
        PQfinish(connection)
    }

    /// Closes the connection; later statements fail with a connection error.
    package func close() {
        PQfinish(connection)
        connection = nil
    }

    /// Whether the connection is up, as libpq last saw it.
    package var isConnected: Bool {
        connection.map { PQstatus($0) == CONNECTION_OK } ?? false
    }

    /// Tries to connect again after the connection broke; whether it is up.
    @discardableResult
    package func reconnect() -> Bool {
        guard let connection else { return false }
        // A new session: nothing is prepared in it, and it listens to nothing.
        prepared = [:]
        channels = []
        PQreset(connection)
        return PQstatus(connection) == CONNECTION_OK
    }

    /// Runs `sql` with `parameters` bound to `$1`, `$2`, ..., and returns its rows (binary format).
    ///
    /// `prepared`: the statement is prepared once on this connection and run by name from then on, so
    /// the server parses it once and can keep its plan. For statements run often with the same text
    /// (many values go in array parameters, ``PostgresValue/texts(_:)``); every parameter's type must
    /// be fixed by the text (a cast) or by its value's type the first time.
    @discardableResult
    package func execute(
        _ sql: String,
        _ parameters: [PostgresValue] = [],
        prepared: Bool = false
    ) throws(PostgresError) -> PostgresRows {
        guard let connection else { throw PostgresError(.connection, message: "the connection is closed") }
        let bound = try Bound(parameters)
        let name = prepared ? try self.name(preparing: sql, types: bound.types, on: connection) : nil
        let result = Self.withPointers(to: bound.buffers, nulls: bound.nulls) { values in
            if let name {
                PQexecPrepared(connection, name, Int32(parameters.count), values, bound.lengths, bound.formats, 1)
            } else {
                PQexecParams(
                    connection,
                    sql,
                    Int32(parameters.count),
                    bound.types,
                    values,
                    bound.lengths,
                    bound.formats,
                    1
                )
            }
        }
        try Self.check(result, on: connection)
        guard let result else { throw PostgresError(.connection, message: Self.message(of: connection)) }
        defer { PQclear(result) }
        return Self.rows(of: result)
    }

    /// Runs `statements` in order, sent together and answered together (libpq's pipeline mode): one
    /// round trip to the server for all of them, where ``execute(_:_:prepared:)`` takes one each. Returns
    /// each statement's rows.
    ///
    /// The first statement that fails throws its error, and the server skips those after it. A
    /// transaction is not implied: a caller that needs one sends `BEGIN` first (a failure then leaves the
    /// transaction aborted, for the caller to roll back), as it would statement by statement.
    @discardableResult
    package func pipeline(_ statements: [PostgresStatement]) throws(PostgresError) -> [PostgresRows] {
        guard let connection else { throw PostgresError(.connection, message: "the connection is closed") }
        if statements.isEmpty { return [] }
        var bounds: [Bound] = []
        var names: [String?] = []
        for statement in statements {
            let bound = try Bound(statement.parameters)
            // Prepared before the pipeline begins (once per connection): a statement's first run.
            names.append(
                statement.prepared ? try name(preparing: statement.sql, types: bound.types, on: connection) : nil
            )
            bounds.append(bound)
        }
        guard PQenterPipelineMode(connection) == 1 else {
            throw PostgresError(.connection, message: Self.message(of: connection))
        }
        var sent = 0
        for (index, statement) in statements.enumerated() {
            let bound = bounds[index]
            let queued = Self.withPointers(to: bound.buffers, nulls: bound.nulls) { values in
                if let name = names[index] {
                    PQsendQueryPrepared(
                        connection,
                        name,
                        Int32(bound.types.count),
                        values,
                        bound.lengths,
                        bound.formats,
                        1
                    )
                } else {
                    PQsendQueryParams(
                        connection,
                        statement.sql,
                        Int32(bound.types.count),
                        bound.types,
                        values,
                        bound.lengths,
                        bound.formats,
                        1
                    )
                }
            }
            guard queued == 1 else { break }
            sent += 1
        }
        // The sync ends the pipeline's implicit grouping and sends what is buffered; its result comes last.
        let synced = PQpipelineSync(connection) == 1
        var results: [PostgresRows] = []
        var failure: PostgresError?
        if synced {
            for _ in 0..<sent {
                // Each statement's results, then a null between it and the next.
                var rows: PostgresRows?
                while let result = PQgetResult(connection) {
                    let status = PQresultStatus(result)
                    if status == PGRES_PIPELINE_ABORTED {
                        PQclear(result)
                        continue
                    }
                    if failure == nil {
                        do throws(PostgresError) {
                            try Self.check(result, on: connection)
                            rows = Self.rows(of: result)
                            PQclear(result)
                        } catch {
                            failure = error
                        }
                    } else {
                        PQclear(result)
                    }
                }
                if PQstatus(connection) != CONNECTION_OK { break }
                if let rows { results.append(rows) }
            }
            // The sync's own result.
            while PQstatus(connection) == CONNECTION_OK, let result = PQgetResult(connection) {
                let status = PQresultStatus(result)
                PQclear(result)
                if status == PGRES_PIPELINE_SYNC { break }
            }
        }
        let ended = PQexitPipelineMode(connection) == 1
        if var failure {
            // A session the server ended answers with its error first and is seen broken only after it:
            // a connection error, whatever the statement's result said.
            if PQstatus(connection) != CONNECTION_OK { failure.kind = .connection }
            throw failure
        }
        guard synced, ended, sent == statements.count, results.count == statements.count,
            PQstatus(connection) == CONNECTION_OK
        else {
            throw PostgresError(.connection, message: Self.message(of: connection))
        }
        return results
    }

    /// A statement's parameters, laid out as libpq takes them (binary format).
    private struct Bound {
        var types: [UInt32] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        var buffers: [[UInt8]] = []
        var nulls: [Bool] = []

        init(_ parameters: [PostgresValue]) throws(PostgresError) {
            types.reserveCapacity(parameters.count)
            for parameter in parameters {
                let (type, bytes) = parameter.binary
                types.append(type)
                buffers.append(bytes ?? [])
                nulls.append(bytes == nil)
                guard let length = Int32(exactly: buffers[buffers.count - 1].count) else {
                    throw PostgresError(.statement, message: "a parameter of \(buffers[buffers.count - 1].count) bytes")
                }
                lengths.append(length)
                formats.append(1)
            }
        }
    }

    /// The name `sql` is prepared under on this connection, preparing it now if it is not yet.
    private func name(
        preparing sql: String,
        types: [UInt32],
        on connection: OpaquePointer
    ) throws(PostgresError)
        -> String
    {
        if let known = prepared[sql] { return known }
        let fresh = "effectloop_\(prepared.count)"
        let made = PQprepare(connection, fresh, sql, Int32(types.count), types)
        try Self.check(made, on: connection)
        PQclear(made)
        prepared[sql] = fresh
        return fresh
    }

    /// The rows of `result` (binary format), and how many rows its command affected.
    private static func rows(of result: OpaquePointer) -> PostgresRows {
        var rows: [[[UInt8]?]] = []
        let (count, columns) = (PQntuples(result), PQnfields(result))
        rows.reserveCapacity(Int(count))
        for row in 0..<count {
            var cells: [[UInt8]?] = []
            cells.reserveCapacity(Int(columns))
            for column in 0..<columns {
                if PQgetisnull(result, row, column) == 1 {
                    cells.append(nil)
                } else {
                    let length = Int(PQgetlength(result, row, column))
                    let value = PQgetvalue(result, row, column)
                    cells.append(value.map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? [])
                }
            }
            rows.append(cells)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresRows(rows: rows, affected: affected)
    }

    /// Throws the error `result` reports (a connection error for none, or when the connection broke);
    /// clears a failed `result`.
    private static func check(_ result: OpaquePointer?, on connection: OpaquePointer) throws(PostgresError) {
        guard let result else { throw PostgresError(.connection, message: message(of: connection)) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            return
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = String(cString: PQresultErrorMessage(result)).trimmingTrailingNewlines()
            let broken = PQstatus(connection) != CONNECTION_OK
            PQclear(result)
            throw PostgresError(broken ? .connection : .statement, sqlState: state, message: message)
        }
    }

    /// Calls `body` with a NULL-terminated array of C strings, valid for the call only.
    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        return body(copies.map { $0.map { UnsafePointer($0) } } + [nil])
    }

    /// Waits up to `milliseconds` for a notification on a channel this connection listens to (`LISTEN`),
    /// or until `wakeup` is signalled; whether a notification (or more) arrived. All waiting
    /// notifications are consumed.
    package func waitForNotification(milliseconds: Int32, wakeup: Wakeup? = nil) throws(PostgresError) -> Bool {
        guard let connection else { throw PostgresError(.connection, message: "the connection is closed") }
        if takeNotifications(connection) { return true }
        let socket = PQsocket(connection)
        guard socket >= 0 else { throw PostgresError(.connection, message: Self.message(of: connection)) }
        var descriptors = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
        if let wakeup { descriptors.append(pollfd(fd: wakeup.descriptor, events: Int16(POLLIN), revents: 0)) }
        let ready = poll(&descriptors, nfds_t(descriptors.count), milliseconds)
        guard ready > 0 else { return false }
        if descriptors.count > 1 && descriptors[1].revents != 0 { wakeup?.clear() }
        guard descriptors[0].revents != 0 else { return false }
        guard PQconsumeInput(connection) == 1 else {
            throw PostgresError(.connection, message: Self.message(of: connection))
        }
        return takeNotifications(connection)
    }

    private func takeNotifications(_ connection: OpaquePointer) -> Bool {
        var any = false
        while let notification = PQnotifies(connection) {
            any = true
            PQfreemem(notification)
        }
        return any
    }

    /// The channels this connection listens to: a connection made anew (after one broke) listens to none.
    private var channels: Set<String> = []

    /// Listens to `channel` (a plain identifier), unless this connection does already; whether it had
    /// to start (notifications sent before then were missed).
    package func listen(to channel: String) throws(PostgresError) -> Bool {
        guard !channels.contains(channel) else { return false }
        try execute("LISTEN \(channel)")
        channels.insert(channel)
        return true
    }

    /// Waits up to `milliseconds` for notifications on the channels this connection listens to, and
    /// returns every one that arrived (none when the wait ran out), each with its channel and payload.
    package func notifications(
        waitingUpTo milliseconds: Int32
    ) throws(PostgresError) -> [(
        channel: String, payload: String
    )] {
        guard let connection else { throw PostgresError(.connection, message: "the connection is closed") }
        var found = Self.collect(connection)
        guard found.isEmpty else { return found }
        var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
        guard descriptor.fd >= 0 else { throw PostgresError(.connection, message: Self.message(of: connection)) }
        guard poll(&descriptor, 1, max(0, milliseconds)) > 0 else { return [] }
        guard PQconsumeInput(connection) == 1 else {
            throw PostgresError(.connection, message: Self.message(of: connection))
        }
        found = Self.collect(connection)
        return found
    }

    private static func collect(_ connection: OpaquePointer) -> [(channel: String, payload: String)] {
        var found: [(channel: String, payload: String)] = []
        while let notification = PQnotifies(connection) {
            let note = notification.pointee
            found.append((note.relname.map { String(cString: $0) } ?? "", note.extra.map { String(cString: $0) } ?? ""))
            PQfreemem(notification)
        }
        return found
    }

    /// Calls `body` with C pointers to `buffers` (NULL where `nulls` says), valid for the call only. The
    /// buffers are laid end to end in one allocation, so a statement with 60,000 parameters needs no
    /// more than one.
    private static func withPointers<R>(
        to buffers: [[UInt8]],
        nulls: [Bool],
        _ body: ([UnsafePointer<CChar>?]) -> R
    ) -> R {
        var storage: [UInt8] = []
        storage.reserveCapacity(buffers.reduce(1) { $0 + $1.count })
        var offsets: [Int] = []
        offsets.reserveCapacity(buffers.count)
        for buffer in buffers {
            offsets.append(storage.count)
            storage += buffer
        }
        // An empty value still needs a non-NULL pointer (NULL means SQL NULL): the last byte serves.
        storage.append(0)
        return storage.withUnsafeBufferPointer { base in
            // Never nil: the storage holds at least the final zero.
            guard let address = base.baseAddress else { return body(nulls.map { _ in nil }) }
            let start = UnsafeRawPointer(address).assumingMemoryBound(to: CChar.self)
            let pointers = offsets.indices.map { index in nulls[index] ? nil : start + offsets[index] }
            return body(pointers)
        }
    }

    private static func message(of connection: OpaquePointer) -> String {
        String(cString: PQerrorMessage(connection)).trimmingTrailingNewlines()
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var copy = self
        while copy.last?.isNewline == true { copy.removeLast() }
        return copy
    }
}
