#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A plain operating-system thread, for tests that send from outside Swift concurrency (as a NIO event
/// loop or a signal handler thread would).
final class OSThread: Sendable {
    private final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private let thread: pthread_t?

    /// Starts a thread running `body`.
    init(_ body: @escaping @Sendable () -> Void) {
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let created = pthread_create(
            &thread,
            nil,
            { raw in
                guard let raw else { return nil }
                let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
                box.body()
                return nil
            },
            box
        )
        if created == 0 {
            self.thread = thread
        } else {
            Unmanaged<Box>.fromOpaque(box).release()
            self.thread = nil
            body()
        }
    }

    /// Waits for the thread to end.
    func join() {
        if let thread { pthread_join(thread, nil) }
    }
}
