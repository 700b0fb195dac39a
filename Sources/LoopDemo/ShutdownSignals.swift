internal import Dispatch
internal import LoopRuntime
internal import Synchronization

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// What SIGINT, SIGTERM and SIGHUP mean to the demo, for as long as the process runs: the first asks
/// for a graceful shutdown, any later one for an immediate stop (jobs killed, summary still printed).
///
/// A `SignalSource` in the loop would restore the signals' default action once the loop stops
/// taking events, so a second signal during the graceful shutdown would kill the process at once,
/// with no summary and its jobs left running. These watchers stay until the process ends. SIGHUP (the
/// terminal went away) is a request to shut down, as SIGTERM is.
public final class ShutdownSignals: Sendable {
    /// The number of signals so far, shared with the watchers' handlers (which must not hold `self`,
    /// whose watchers hold them).
    private final class Count: Sendable {
        let value = Atomic<Int>(0)
    }

    private let deliveries = Count()
    private let watchers = Locked<[any DispatchSourceSignal]>([])

    /// Starts watching; `graceful` is called on the first signal, `immediate` on every later one.
    public init(graceful: @escaping @Sendable () -> Void, immediate: @escaping @Sendable () -> Void) {
        let queue = DispatchQueue(label: "loop-demo.signals")
        let deliveries = self.deliveries
        let sources = [SIGINT, SIGTERM, SIGHUP].map { number in
            signal(number, SIG_IGN)
            let watcher = DispatchSource.makeSignalSource(signal: number, queue: queue)
            watcher.setEventHandler {
                if deliveries.value.add(1, ordering: .relaxed).newValue == 1 { graceful() } else { immediate() }
            }
            watcher.resume()
            return watcher
        }
        watchers.withLock { $0 = sources }
    }

    /// How many signals have arrived.
    public var count: Int { deliveries.value.load(ordering: .relaxed) }
}
