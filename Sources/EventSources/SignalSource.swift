public import LoopCore

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A source that turns Unix signals into events, so a service can shut down gracefully on `SIGTERM`.
///
/// While the source runs, the signals it watches no longer take their default action (ending the
/// process); each delivery becomes an event instead. When the source is cancelled, the signals stay
/// caught (by libdispatch, which then drops them), unless it was made with
/// `restoringDisposition: true`, which puts back the default disposition of each signal that had it at
/// the start (see ``SignalWatcher``).
///
/// ```swift
/// SignalSource([.interrupt, .terminate]) { signal in .shutdownRequested(signal) }
/// ```
///
/// A process has one disposition per signal, and libdispatch on Linux installs its handler for a
/// signal once per process: a disposition put back (`restoringDisposition: true`) ends the process at
/// the next delivery even where another watcher (a swift-service-lifecycle `ServiceGroup`, a second
/// loop's source) still waits for that signal, and no later `SignalSource` or `DispatchSource` catches
/// it again. Restore only in a process that watches the signal once (a command-line tool whose Ctrl-C
/// should end it after the loop stopped). Under a `ServiceGroup`, the group owns `SIGTERM` and `SIGINT`
/// through its graceful shutdown signals: stop the loop from there (the integrations' service adapter
/// calls `Loop.stop(gracePeriod:)` on graceful shutdown) and give the loop no
/// `SignalSource` for them.
public struct SignalSource<Event: Sendable>: EventSource {
    private let signals: [ProcessSignal]
    private let restoring: Bool
    private let event: @Sendable (ProcessSignal) -> Event

    /// Creates a source that sends `event` of each delivery of any of `signals`.
    ///
    /// - Parameters:
    ///   - signals: the signals to watch.
    ///   - restoringDisposition: whether each signal that had its default disposition when the source
    ///     started gets it back when it stops; by default the signals stay caught (and dropped) after it,
    ///     which is what a process where something else watches them too needs.
    ///   - event: the event for a delivery.
    public init(
        _ signals: [ProcessSignal],
        restoringDisposition: Bool = false,
        event: @escaping @Sendable (ProcessSignal) -> Event
    ) {
        self.signals = signals
        self.restoring = restoringDisposition
        self.event = event
    }

    /// Watches the signals until cancelled.
    public func run(send: Send<Event>) async throws {
        let (deliveries, continuation) = AsyncStream<ProcessSignal>.makeStream()
        let watcher = SignalWatcher(signals, restoringDisposition: restoring) { continuation.yield($0) }
        defer {
            watcher.cancel()
            continuation.finish()
        }
        for await delivery in deliveries {
            if case .rejected(let rejection) = send(event(delivery)), rejection != .inboxFull { return }
        }
    }
}
