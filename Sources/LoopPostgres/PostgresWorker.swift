internal import Dispatch

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

    init(_ conninfo: String, label: String, applicationName: String? = nil) {
        self.conninfo = conninfo
        self.applicationName = applicationName
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
        connection = fresh
        return fresh
    }
}
