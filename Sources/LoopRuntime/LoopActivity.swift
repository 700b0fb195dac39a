public import EffectHandlers
public import LoopCore

/// Something a loop did, as reported to its ``LoopObserver``.
///
/// Every effect an update returns gets an ``EffectID`` at once, so each activity of an effect names
/// it: the start and the end of one effect pair exactly, even when two equal effects run at once.
public enum LoopActivity<Event: Sendable, Effect: Sendable>: Sendable {
    /// The update processed `event`, which came from `origin`, in `duration`; `inboxDepth` events were
    /// waiting afterwards; `effects` are the effects the update returned, in order (what happens to each
    /// is reported as it happens, with its id); `firstEffect` is the id of the first of them, and in a
    /// ``Loop``'s report the effect at offset `n` has id `firstEffect.advanced(by: n)` (a durable loop
    /// lists only its program's effects, which keep the ids of the loop that runs them). With no
    /// effects, `firstEffect` names none (it is 0, which no effect has). A
    /// ``LoopStateObserver`` can read the state right after the event.
    case eventProcessed(
        Event,
        origin: EventOrigin,
        duration: Duration,
        inboxDepth: Int,
        effects: [Effect],
        firstEffect: EffectID
    )
    /// `event` was turned away, for `reason`.
    case eventRejected(Event, reason: Rejection)
    /// `event` had been taken but was dropped unprocessed (drop-oldest inbox, or an immediate stop).
    case eventDropped(Event)
    /// `effect` was handed to its handler.
    case effectStarted(Effect, id: EffectID, lifecycle: EffectLifecycle)
    /// `effect`'s handler returned normally, after running for `duration`.
    case effectCompleted(Effect, id: EffectID, duration: Duration)
    /// `effect` failed with `error` after running for `duration` (zero for an effect no route takes);
    /// `mappedTo` is the event the router turned the error into, if any.
    case effectFailed(Effect, id: EffectID, error: any Error, mappedTo: Event?, duration: Duration)
    /// `effect` was cancelled, before or after it started.
    case effectCancelled(Effect, id: EffectID)
    /// `effect` ran past `timeout` and was cancelled; `mappedTo` is the event the router made of it.
    case effectTimedOut(Effect, id: EffectID, timeout: Duration, mappedTo: Event?)
    /// `effect` was still running when the loop stopped without waiting (grace period over, or `run()`'s
    /// task cancelled): its handler was cancelled and the loop no longer waits for it.
    case effectAbandoned(Effect, id: EffectID)
    /// `effect` was dropped by a `dropIfRunning` lifecycle.
    case effectDropped(Effect, id: EffectID)
    /// An event source threw `error`; the loop keeps running.
    case sourceFailed(any Error)
    /// An event source was exhausted.
    case sourceFinished
    /// Graceful shutdown began.
    case stopping
    /// The loop stopped.
    case stopped(LoopReport)
}

/// One effect a loop's update returned (or its program's start-up), among all the loop's effects: unique
/// within the loop, and increasing in the order the updates returned them.
///
/// The id is given when the update returns the effect, so an effect that never starts (dropped, or
/// cancelled while it waited behind its key) has one too, and the ids of one event's effects follow
/// each other (see ``LoopActivity/eventProcessed(_:origin:duration:inboxDepth:effects:firstEffect:)``).
/// It is not kept across restarts: a loop started again (a durable entity recovered) counts again from 1.
public struct EffectID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The number: 1 for a loop's first effect, then one more for each.
    public let rawValue: UInt64

    /// The id numbered `rawValue`.
    @inlinable
    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    /// The id `offset` effects later.
    @inlinable
    public func advanced(by offset: Int) -> EffectID {
        EffectID(rawValue: rawValue &+ UInt64(truncatingIfNeeded: offset))
    }

    /// Whether `lhs` was returned before `rhs` by the same loop.
    @inlinable
    public static func < (lhs: EffectID, rhs: EffectID) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The number, in decimal.
    public var description: String { String(rawValue) }
}
