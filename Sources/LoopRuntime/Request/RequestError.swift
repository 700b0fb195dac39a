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

    /// A sentence saying why.
    public var description: String {
        switch self {
        case .rejected(let rejection): "the request was rejected: \(rejection)"
        case .loopStopped: "the loop stopped before it replied"
        case .unanswered: "the loop let go of the request without replying"
        case .timedOut(let deadline): "no reply within \(deadline)"
        case .cancelled: "the waiting task was cancelled"
        }
    }
}
