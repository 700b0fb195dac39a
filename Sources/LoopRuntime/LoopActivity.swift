public import EffectHandlers
public import LoopCore

/// Something a loop did, as reported to its ``LoopObserver``.
public enum LoopActivity<Event: Sendable, Effect: Sendable>: Sendable {
    /// The update processed `event`, which came from `origin`, in `duration`; `inboxDepth` events were
    /// waiting afterwards; `effects` are the effects the update returned, in order (what happens to each
    /// is reported as it happens). A ``LoopStateObserver`` can read the state right after the event.
    case eventProcessed(Event, origin: EventOrigin, duration: Duration, inboxDepth: Int, effects: [Effect])
    /// `event` was turned away, for `reason`.
    case eventRejected(Event, reason: Rejection)
    /// `event` had been taken but was dropped unprocessed (drop-oldest inbox, or an immediate stop).
    case eventDropped(Event)
    /// `effect` was handed to its handler.
    case effectStarted(Effect, lifecycle: EffectLifecycle)
    /// `effect`'s handler returned normally, after running for `duration`.
    case effectCompleted(Effect, duration: Duration)
    /// `effect` failed with `error` after running for `duration` (zero for an effect no route takes);
    /// `mappedTo` is the event the router turned the error into, if any.
    case effectFailed(Effect, error: any Error, mappedTo: Event?, duration: Duration)
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
