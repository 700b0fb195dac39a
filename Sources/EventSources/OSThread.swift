#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A plain operating-system thread: for work that must block (reading a descriptor) without holding a
/// thread of the concurrency pool, and for tests and benchmarks that send from outside Swift
/// concurrency, as a NIO event loop would.
package final class OSThread: Sendable {
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// The thread, or `nil` when none could be started (the body then ran on the caller's thread).
    private let thread: pthread_t?

    /// Starts a thread running `body`; if no thread can be started, runs `body` before returning.
    package convenience init(_ body: @escaping @Sendable () -> Void) {
        self.init(body, runHereIfUnavailable: true)
    }

    /// Starts a thread running `body`; `started` is `false` when none could be started.
    package init(_ body: @escaping @Sendable () -> Void, runHereIfUnavailable: Bool) {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        let created = pthread_create(
            &thread,
            nil,
            { context in
                guard let context else { return nil }
                Unmanaged<Body>.fromOpaque(context).takeRetainedValue().run()
                return nil
            },
            context
        )
        if created == 0 {
            self.thread = thread
        } else {
            Unmanaged<Body>.fromOpaque(context).release()
            self.thread = nil
            if runHereIfUnavailable { body() }
        }
    }

    /// Whether a thread was started.
    package var started: Bool { thread != nil }

    /// Waits for the thread to end.
    package func join() {
        if let thread { pthread_join(thread, nil) }
    }

    /// Lets the thread end on its own, releasing its resources then; it can no longer be joined.
    package func detach() {
        if let thread { pthread_detach(thread) }
    }
}
