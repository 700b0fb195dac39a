#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Wakes a thread blocked in `poll` (a connection waiting for notifications) from any other thread: a
/// connected pair of sockets, one end polled by the waiter beside its connection's socket, the other
/// written a byte to by ``signal()``. A signal given before the wait begins is not lost: the byte waits.
package final class Wakeup: Sendable {
    /// The read end, for `poll`.
    let descriptor: Int32
    private let writeEnd: Int32

    /// A socket pair of its own; `nil` when the process has no descriptor left (the waiter then wakes only when
    /// its wait runs out).
    package init?() {
        var ends: [Int32] = [0, 0]
        // A socket pair rather than `pipe`, for its flags at creation (Glibc's module has no `pipe2`).
        // Non-blocking: a full buffer wakes the waiter already, and a clear never blocks. Closed on exec
        // from the start: a child spawned meanwhile (a job's command) must not inherit either end.
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &ends) == 0 else { return nil }
        (descriptor, writeEnd) = (ends[0], ends[1])
    }

    /// Wakes the waiter, or the next one to wait.
    package func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Empties the waiter's end, once it has woken.
    func clear() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(descriptor, &bytes, bytes.count) > 0 {}
    }

    deinit {
        close(descriptor)
        close(writeEnd)
    }
}
