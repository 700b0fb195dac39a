public import EffectHandlers
public import LoopCore

/// Something a loop did, as reported to its ``LoopObserver``.
public enum LoopActivity<Event: Sendable, Effect: Sendable>: Sendable {
    /// The update processed `event`, which came from `origin`, in `duration`; `inboxDepth` events were
    /// waiting afterwards.
    case eventProcessed(Event, origin: EventOrigin, duration: Duration, inboxDepth: Int)
    /// `event` was turned away, for `reason`.
    case eventRejected(Event, reason: Rejection)
    /// `event` had been taken but was dropped unprocessed (drop-oldest inbox, or an immediate stop).
    case eventDropped(Event)
    /// `effect` was handed to its handler.
    case effectStarted(Effect, lifecycle: EffectLifecycle)
    /// `effect`'s handler returned normally.
    case effectCompleted(Effect)
    /// `effect` failed with `error`; `mappedTo` is the event the router turned the error into, if any.
    case effectFailed(Effect, error: any Error, mappedTo: Event?)
    /// `effect` was cancelled, before or after it started.
    case effectCancelled(Effect)
    /// `effect` ran past `timeout` and was cancelled; `mappedTo` is the event the router made of it.
    case effectTimedOut(Effect, timeout: Duration, mappedTo: Event?)
    /// `effect` was still running when the loop stopped without waiting (grace period over, or `run()`'s
    /// task cancelled): its handler was cancelled and the loop no longer waits for it.
    case effectAbandoned(Effect)
    /// `effect` was dropped by a `dropIfRunning` lifecycle.
    case effectDropped(Effect)
    /// An event source threw `error`; the loop keeps running.
    case sourceFailed(any Error)
    /// An event source was exhausted.
    case sourceFinished
    /// Graceful shutdown began.
    case stopping
    /// The loop stopped.
    case stopped(LoopReport)
}
