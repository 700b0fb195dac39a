internal import Dispatch
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
/// process); each delivery becomes an event instead. When the source is cancelled, each signal's
/// previous disposition is restored.
///
/// ```swift
/// SignalSource([.interrupt, .terminate]) { signal in .shutdownRequested(signal) }
/// ```
public struct SignalSource<Event: Sendable>: EventSource {
    private let signals: [UnixSignal]
    private let event: @Sendable (UnixSignal) -> Event

    /// Creates a source that sends `event` of each delivery of any of `signals`.
    public init(_ signals: [UnixSignal], event: @escaping @Sendable (UnixSignal) -> Event) {
        self.signals = signals
        self.event = event
    }

    /// Watches the signals until cancelled.
    public func run(send: Send<Event>) async throws {
        let (deliveries, continuation) = AsyncStream<UnixSignal>.makeStream()
        let queue = DispatchQueue(label: "EffectLoop.SignalSource")
        let previous = signals.map { signal($0.rawValue, SIG_IGN) }
        let watchers = signals.map { unixSignal in
            let watcher = DispatchSource.makeSignalSource(signal: unixSignal.rawValue, queue: queue)
            watcher.setEventHandler { continuation.yield(unixSignal) }
            watcher.resume()
            return watcher
        }
        defer {
            for (index, watcher) in watchers.enumerated() {
                watcher.cancel()
                _ = signal(signals[index].rawValue, previous[index])
            }
            continuation.finish()
        }
        for await delivery in deliveries {
            if case .rejected(let rejection) = send(event(delivery)), rejection != .inboxFull { return }
        }
    }
}
