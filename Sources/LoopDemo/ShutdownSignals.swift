internal import EventSources
internal import Synchronization

/// What SIGINT, SIGTERM and SIGHUP mean to the demo while it is kept (the demo keeps it until it has
/// printed its summary): the first asks for a graceful shutdown, any later one for an immediate stop
/// (jobs killed, summary still printed).
///
/// A `SignalSource` in the loop would stop with the loop's sources, when the graceful shutdown begins,
/// and a second signal must still force the immediate stop: this watcher stays until the demo is done. SIGHUP (the terminal went away) is a request to shut down, as SIGTERM is.
public final class ShutdownSignals: Sendable {
    /// The number of signals so far, shared with the watcher's handler (which must not hold `self`,
    /// whose watcher holds it).
    private final class Count: Sendable {
        let value = Atomic<Int>(0)
    }

    private let deliveries: Count
    /// Watching for as long as this is kept; cancelled when it is released.
    private let watcher: SignalWatcher

    /// Starts watching; `graceful` is called on the first signal, `immediate` on every later one.
    public init(graceful: @escaping @Sendable () -> Void, immediate: @escaping @Sendable () -> Void) {
        let deliveries = Count()
        self.deliveries = deliveries
        watcher = SignalWatcher([.interrupt, .terminate, .hangup]) { _ in
            if deliveries.value.add(1, ordering: .relaxed).newValue == 1 { graceful() } else { immediate() }
        }
    }

    /// How many signals have arrived.
    public var count: Int { deliveries.value.load(ordering: .relaxed) }
}
