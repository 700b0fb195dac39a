/// What a loop did: counts of events and effects, and, once it has stopped, how it stopped.
///
/// The counts always add up: every event sent was processed, rejected, dropped, or is still queued;
/// every effect started was completed, failed, cancelled, timed out, abandoned, or is still in flight.
public struct LoopReport: Hashable, Sendable, CustomStringConvertible {
    /// How a loop stopped.
    public enum Ending: Hashable, Sendable {
        /// Graceful shutdown: every event the loop accepted was processed (but for those a drop-oldest
        /// inbox replaced by newer ones, by design, counted in ``LoopReport/eventsDropped``), and every
        /// effect it started ended on its own.
        case drained
        /// Graceful shutdown reached its deadline with work left: queued events were dropped, effects not
        /// yet started were cancelled, and effects still running were cancelled and abandoned (``LoopReport/effectsAbandoned``).
        case deadlineExceeded
        /// The task running the loop was cancelled: the loop stopped at once, dropping queued events,
        /// cancelling effects not yet started and abandoning those running.
        case cancelled
        /// `stop()` came before `run()`: the loop never ran, and the events sent to it were dropped
        /// (counted in ``LoopReport/eventsDropped`` and reported to the observer).
        case neverStarted
    }

    /// Events sent to the loop, from outside and from its handlers.
    public var eventsSent = 0
    /// Events processed by the update.
    public var eventsProcessed = 0
    /// Events turned away (``/LoopCore/Rejection``).
    public var eventsRejected = 0
    /// Events taken but never processed: dropped by a drop-oldest inbox, or still queued when the loop
    /// stopped without draining (deadline, cancellation, stop before run).
    public var eventsDropped = 0
    /// Effects handed to a handler (synchronous or asynchronous).
    public var effectsStarted = 0
    /// Effects whose handler returned normally.
    public var effectsCompleted = 0
    /// Effects whose handler threw, or that no route accepts.
    public var effectsFailed = 0
    /// Effects cancelled: by a `latest` or `cancel` lifecycle, or at shutdown; including effects
    /// cancelled while queued, before they started.
    public var effectsCancelled = 0
    /// Effects cancelled because they ran past their timeout.
    public var effectsTimedOut = 0
    /// Effects dropped by a `dropIfRunning` lifecycle, never started.
    public var effectsDropped = 0
    /// Effects still running when the loop stopped without waiting (the grace period's end, or the
    /// cancellation of `run()`'s task): their handlers were cancelled, `run()` returned without waiting
    /// for them, and anything they send afterwards is turned away.
    public var effectsAbandoned = 0
    /// Effects already reported timed out whose handlers had still not returned when the loop stopped
    /// (they ignore cancellation). Counted so that no task the loop started goes unaccounted for.
    public var timedOutStillRunning = 0
    /// Async senders waiting for room in a full inbox (``InboxPolicy/Overflow/suspendSender``); their
    /// events are counted as sent once they are taken or turned away.
    public var sendersWaiting = 0
    /// How the loop stopped, or `nil` while it has not.
    public var ending: Ending?

    /// Creates an empty report.
    public init() {}

    /// Events sent and not yet processed, rejected or dropped.
    public var eventsQueued: Int { eventsSent - eventsProcessed - eventsRejected - eventsDropped }

    /// Effects started and not yet ended.
    public var effectsInFlight: Int {
        effectsStarted - effectsCompleted - effectsFailed - effectsTimedOut - effectsCancelledAfterStart
            - effectsAbandoned
    }

    /// Effects cancelled after they started (those cancelled while queued, or before their task began,
    /// never started). Part of ``effectsCancelled``.
    public var effectsCancelledAfterStart = 0

    /// One line with every count.
    public var description: String {
        let how = ending.map { " (\($0))" } ?? ""
        return "events: \(eventsSent) sent, \(eventsProcessed) processed, \(eventsRejected) rejected, "
            + "\(eventsDropped) dropped; effects: \(effectsStarted) started, \(effectsCompleted) completed, "
            + "\(effectsFailed) failed, \(effectsCancelled) cancelled, \(effectsTimedOut) timed out, "
            + "\(effectsDropped) dropped"
            + (effectsAbandoned > 0 ? ", \(effectsAbandoned) abandoned" : "") + how
    }
}
