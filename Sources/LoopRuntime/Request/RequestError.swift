public import LoopCore

/// Why a request got no reply.
public enum RequestError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The loop did not take the request's event, for the reason given; nothing of it was processed.
    case rejected(Rejection)
    /// The loop stopped before it replied.
    case loopStopped
    /// The loop let go of the request without replying: no copy of its ``/LoopCore/ReplyTo`` is left
    /// (the update neither replied nor kept it), so no reply can ever come. Noticed when the last copy
    /// goes: an observer that keeps events (a recorder, a journal) keeps it too, and the caller then
    /// waits for its timeout or the loop's stop. Give requests a timeout.
    case unanswered
    /// No reply came within the deadline the caller gave.
    case timedOut(after: Duration)
    /// The waiting task was cancelled.
    case cancelled
    /// A durable entity's store failed before the reply was recorded (or the entity's events no
    /// longer decode); the reason names the stream. The request's event may or may not be recorded: a
    /// repeat under the same key, once the store works again, answers from the record or applies it.
    case storeFailed(String)
    /// The key was used before, for this entity, with a different event: a repeat must send the same
    /// event as the first try. Nothing was applied.
    case keyReused(String)
    /// The request cannot be made as asked (a key too long, a reply of another type than the
    /// program's), in words saying what is wrong. Nothing was applied.
    case invalid(String)

    /// A sentence saying why.
    public var description: String {
        switch self {
        case .rejected(let rejection): "the request was rejected: \(rejection)"
        case .loopStopped: "the loop stopped before it replied"
        case .unanswered: "the loop let go of the request without replying"
        case .timedOut(let deadline): "no reply within \(deadline)"
        case .cancelled: "the waiting task was cancelled"
        case .storeFailed(let reason): "the store failed before the reply was recorded: \(reason)"
        case .keyReused(let key): "the key '\(key.prefix(100))' was used before with a different event"
        case .invalid(let reason): "the request is invalid: \(reason)"
        }
    }
}
