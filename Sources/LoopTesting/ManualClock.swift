internal import LoopRuntime

/// A clock whose time moves only when a test moves it.
///
/// Inject it wherever the code under test takes a clock (timers, effect timeouts, shutdown grace
/// periods, backoff), then drive time from the test: sleepers wake exactly when ``advance(by:)``
/// passes their deadline, in deadline order, and never otherwise. ``sleepers(atLeast:)`` waits until
/// the code has started sleeping, so a test never races it.
///
/// ```swift
/// let clock = ManualClock()
/// let loop = Loop(program: program, effects: router, sources: [TimerSource(every: .seconds(5), clock: clock, event: .tick)])
/// await clock.sleepers(atLeast: 1)
/// clock.advance(by: .seconds(5))       // exactly one tick
/// ```
public final class ManualClock: Clock, Sendable {
    /// A point in the clock's time: the duration since the clock was created.
    public struct Instant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
        /// Time since the clock started.
        public var offset: Duration

        /// Creates the instant `offset` after the clock started.
        public init(offset: Duration) {
            self.offset = offset
        }

        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant {
            Instant(offset: offset + duration)
        }

        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration {
            other.offset - offset
        }

        /// Whether `lhs` comes before `rhs`.
        public static func < (lhs: Instant, rhs: Instant) -> Bool {
            lhs.offset < rhs.offset
        }

        /// `+<offset>`.
        public var description: String { "+\(offset)" }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct Timeline {
        var now = Instant(offset: .zero)
        var sleepers: [UInt64: Sleeper] = [:]
        var nextID: UInt64 = 0
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

        /// The watchers whose count of sleepers is now reached.
        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, Never>] {
            let ready = watchers.filter { sleepers.count >= $0.count }
            watchers.removeAll { sleepers.count >= $0.count }
            return ready.map(\.continuation)
        }
    }

    private let timeline = Locked(Timeline())

    /// Creates a clock at offset zero.
    public init() {}

    /// The current instant.
    public var now: Instant {
        timeline.withLock { $0.now }
    }

    /// The smallest step the clock takes.
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// How many tasks are sleeping on the clock now.
    public var sleeperCount: Int {
        timeline.withLock { $0.sleepers.count }
    }

    /// Sleeps until the clock reaches `deadline`; throws `CancellationError` if the task is cancelled
    /// first.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = timeline.withLock { timeline in
            timeline.nextID &+= 1
            return timeline.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (wake, cancelled, watchers) = timeline.withLock { timeline in
                    if Task.isCancelled { return (false, true, [CheckedContinuation<Void, Never>]()) }
                    if deadline <= timeline.now { return (true, false, []) }
                    timeline.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return (false, false, timeline.satisfiedWatchers())
                }
                for watcher in watchers { watcher.resume() }
                if wake { continuation.resume() }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            timeline.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(
                throwing: CancellationError()
            )
        }
    }

    /// Moves time forward by `duration`, waking every sleeper whose deadline is passed, in deadline
    /// order.
    public func advance(by duration: Duration) {
        let woken = timeline.withLock { timeline in
            timeline.now = timeline.now.advanced(by: duration)
            let due = timeline.sleepers.filter { $0.value.deadline <= timeline.now }
                .sorted { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
            for (id, _) in due { timeline.sleepers[id] = nil }
            return due.map(\.value.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns once at least `count` tasks are sleeping on the clock.
    public func sleepers(atLeast count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = timeline.withLock { timeline in
                guard timeline.sleepers.count < count else { return true }
                timeline.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
