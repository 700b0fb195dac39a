internal import Dispatch

/// The session setting of connections whose statements all find their rows by key (a store's writer,
/// a cluster client): never a sequential scan. A table that grew since its statistics were last taken
/// (a new cluster's `replies`, between two runs of autovacuum) otherwise gets plans that scan it whole
/// for each statement, and keeps them while it grows.
let keyedLookupsOnly = "SET enable_seqscan = off"

extension Duration {
    /// The duration in whole milliseconds (rounded down), clamped to `Int64`: what SQL intervals and
    /// `poll` timeouts take.
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        let (sum, past) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return past ? .max : sum
    }
}

/// A connection and the serial queue it is used on: every use of the connection is a block on that
/// queue, so libpq's one-thread-at-a-time rule holds, and blocking calls stay off Swift's cooperative
/// threads.
///
/// `@unchecked Sendable` is safe: `connection` is read and written only inside blocks run on `queue`,
/// a serial queue, which orders every access one after another (`run` and `runInline` are the only
/// ways in; `runInline` is called only from blocks already on `queue`).
final class PostgresWorker: @unchecked Sendable {
    private let queue: DispatchQueue
    private var connection: PostgresConnection?
    private var closed = false
    private let conninfo: String
    private let applicationName: String?
    /// Statements run on each new connection before its first use (session settings).
    private let setup: [String]

    /// A worker for the database `conninfo` names; each connection it makes runs `setup` first.
    init(_ conninfo: String, label: String, applicationName: String? = nil, setup: [String] = []) {
        self.conninfo = conninfo
        self.applicationName = applicationName
        self.setup = setup
        self.queue = DispatchQueue(label: label)
    }

    /// Runs `body` with the connection on the worker's queue (connecting first if needed) and returns
    /// what it returns.
    func run<Result: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) throws(PostgresError) -> Result
    ) async throws(PostgresError) -> Result {
        let outcome = await withCheckedContinuation {
            (continuation: CheckedContinuation<Swift.Result<Result, PostgresError>, Never>) in
            queue.async {
                continuation.resume(returning: self.runInline(body))
            }
        }
        return try outcome.get()
    }

    /// Schedules `body` on the worker's queue without waiting.
    func schedule(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }

    /// Schedules `body` on the worker's queue after `delay`, without waiting.
    func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) {
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds)), execute: body)
    }

    /// Runs `body` with the connection; only from a block already on the queue.
    func runInline<Result>(
        _ body: (PostgresConnection) throws(PostgresError) -> Result
    ) -> Swift.Result<Result, PostgresError> {
        do throws(PostgresError) {
            let connection = try connected()
            do throws(PostgresError) {
                return .success(try body(connection))
            } catch {
                // A broken connection is dropped: the next use connects again.
                if error.kind == .connection { self.connection = nil }
                return .failure(error)
            }
        } catch {
            return .failure(error)
        }
    }

    /// Closes the connection, after every block scheduled before.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                self.connection?.close()
                self.connection = nil
                self.closed = true
                continuation.resume()
            }
        }
    }

    private func connected() throws(PostgresError) -> PostgresConnection {
        if closed { throw PostgresError(.connection, message: "the store is closed") }
        if let connection, connection.isConnected { return connection }
        let fresh = try PostgresConnection(conninfo, applicationName: applicationName)
        for statement in setup { try fresh.execute(statement) }
        connection = fresh
        return fresh
    }
}
