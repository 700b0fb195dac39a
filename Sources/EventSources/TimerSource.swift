public import LoopCore

/// A source that sends an event periodically, on an injected clock.
///
/// The first event comes one `interval` after the source starts. Deadlines are spaced exactly
/// `interval` apart on the clock, so a late tick does not push the later ones back. With a manual
/// clock in a test, ticks come exactly when the test advances the clock.
///
/// ```swift
/// TimerSource(every: .seconds(5), clock: ContinuousClock(), event: .statusTick)
/// ```
public struct TimerSource<Event: Sendable, C: Clock>: EventSource where C.Duration == Duration {
    private let interval: Duration
    private let clock: C
    private let event: @Sendable () -> Event

    /// Creates a timer that sends `event` every `interval` of `clock`.
    public init(every interval: Duration, clock: C, event: @autoclosure @escaping @Sendable () -> Event) {
        self.interval = interval
        self.clock = clock
        self.event = event
    }

    /// Sends an event every interval until cancelled or the loop stops.
    public func run(send: Send<Event>) async throws {
        guard interval > .zero else { throw TimerSourceError.nonPositiveInterval(interval) }
        var deadline = clock.now.advanced(by: interval)
        while true {
            try await clock.sleep(until: deadline, tolerance: nil)
            if case .rejected(let rejection) = send(event()), rejection != .inboxFull { return }
            deadline = deadline.advanced(by: interval)
        }
    }
}

/// The reason a ``TimerSource`` could not run.
public enum TimerSourceError: Error, Hashable, Sendable {
    /// The interval was zero or negative: the timer would never wait.
    case nonPositiveInterval(Duration)
}
