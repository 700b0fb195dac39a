#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Wakes a thread blocked in `poll` (a connection waiting for notifications) from any other thread: a
/// pipe whose read end the waiter polls beside its socket, and whose write end ``signal()`` writes a
/// byte to. A signal given before the wait begins is not lost: the byte waits in the pipe.
package final class Wakeup: Sendable {
    /// The read end, for `poll`.
    let descriptor: Int32
    private let writeEnd: Int32

    /// A pipe of its own; `nil` when the process has no descriptor left (the waiter then wakes only when
    /// its wait runs out).
    package init?() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            // Non-blocking: a full pipe wakes the waiter already, and a clear never blocks.
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        (descriptor, writeEnd) = (ends[0], ends[1])
    }

    /// Wakes the waiter, or the next one to wait.
    package func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Empties the pipe, once the waiter has woken.
    func clear() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(descriptor, &bytes, bytes.count) > 0 {}
    }

    deinit {
        close(descriptor)
        close(writeEnd)
    }
}
