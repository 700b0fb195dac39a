/// How many events a loop's inbox holds, and what happens to an event that arrives when it is full.
///
/// Every event an inbox turns away is counted (``LoopReport``) and reported to the observer, and the
/// sender learns it from the ``/LoopCore/Delivery`` that `send` returns.
public struct InboxPolicy: Hashable, Sendable, CustomStringConvertible {
    /// What a full inbox does with a new event.
    public enum Overflow: Hashable, Sendable {
        /// Turn the new event away: `send` returns `.rejected(.inboxFull)`.
        case rejectNewest
        /// Take the new event and drop the oldest queued one, reported as dropped.
        case dropOldest
        /// Make an `async` sender wait for room; a synchronous `send` is turned away as with
        /// ``rejectNewest``.
        case suspendSender
    }

    /// The most events the inbox holds, or `nil` for no bound.
    public let capacity: Int?
    /// What a full inbox does; irrelevant when unbounded.
    public let overflow: Overflow

    /// An inbox with no bound: every event is taken while the loop runs. The default.
    public static let unbounded = InboxPolicy(capacity: nil, overflow: .rejectNewest)

    /// An inbox holding at most `capacity` events (at least 1), with `overflow` deciding what happens
    /// beyond.
    public static func bounded(_ capacity: Int, whenFull overflow: Overflow) -> InboxPolicy {
        InboxPolicy(capacity: max(1, capacity), overflow: overflow)
    }

    /// `unbounded`, or `bounded(N, whenFull: …)`.
    public var description: String {
        capacity.map { "bounded(\($0), whenFull: .\(overflow))" } ?? "unbounded"
    }
}
