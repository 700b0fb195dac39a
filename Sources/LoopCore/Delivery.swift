/// Whether a loop took an event that was sent to it.
public enum Delivery: Hashable, Sendable, CustomStringConvertible {
    /// The event is queued and will be processed in arrival order.
    case accepted
    /// The event was not taken, for the reason given; nothing of it was processed.
    case rejected(Rejection)

    /// Whether the event was taken.
    @inlinable
    public var isAccepted: Bool {
        if case .accepted = self { true } else { false }
    }

    /// `accepted`, or `rejected: <reason>`.
    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .rejected(let rejection): "rejected: \(rejection)"
        }
    }
}

/// Why a loop did not take an event.
public struct Rejection: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case stopping
        case stopped
        case inboxFull
        case effectEnded
        case failed
        case invalid
    }

    private let code: Code

    /// The loop is shutting down: it takes no new events from outside, only the results of effects
    /// still in flight.
    public static let stopping = Rejection(code: .stopping)
    /// The loop has stopped; it takes no events at all.
    public static let stopped = Rejection(code: .stopped)
    /// The loop's inbox is bounded and full, and its policy rejects the newest event.
    public static let inboxFull = Rejection(code: .inboxFull)
    /// The effect whose handler sent the event had already ended (it timed out): a late handler cannot
    /// change the state.
    public static let effectEnded = Rejection(code: .effectEnded)
    /// The loop failed (a durable loop whose store failed, say) and takes no events; its error says why.
    public static let failed = Rejection(code: .failed)
    /// The event cannot be taken as sent: a durable loop's caller key that is empty or too long, or an
    /// event with a key that does not encode. Nothing of it was applied.
    public static let invalid = Rejection(code: .invalid)

    /// A sentence saying why.
    public var description: String {
        switch code {
        case .stopping: "the loop is stopping and takes no new events"
        case .stopped: "the loop has stopped"
        case .inboxFull: "the loop's inbox is full"
        case .effectEnded: "the effect that sent it had already ended (timed out)"
        case .failed: "the loop failed and takes no events"
        case .invalid: "the event cannot be taken as sent (an invalid key, or an event that does not encode)"
        }
    }
}
