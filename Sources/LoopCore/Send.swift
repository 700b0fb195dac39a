/// The way events reach a loop: effect handlers and event sources receive one and call it.
///
/// Calling it never waits and never re-enters the update: the event is queued and processed after the
/// one being processed now. The result says whether the loop took the event.
///
/// ```swift
/// func handle(_ effect: Effect, send: Send<Event>) async throws {
///     let body = try await client.get(effect.url)
///     send(.fetched(body))
/// }
/// ```
public struct Send<Event>: Sendable {
    @usableFromInline
    let deliver: @Sendable (Event) -> Delivery
    @usableFromInline
    let wait: (@Sendable (Event) async -> Delivery)?

    /// Creates a sender that hands each event to `deliver`.
    @inlinable
    public init(_ deliver: @escaping @Sendable (Event) -> Delivery) {
        self.deliver = deliver
        self.wait = nil
    }

    /// Creates a sender that hands each event to `deliver`, and to `waitingForRoom` when the sender
    /// can wait (see ``waitingForRoom(_:)``).
    @inlinable
    public init(
        _ deliver: @escaping @Sendable (Event) -> Delivery,
        waitingForRoom: @escaping @Sendable (Event) async -> Delivery
    ) {
        self.deliver = deliver
        self.wait = waitingForRoom
    }

    /// Sends `event`, waiting while the loop's inbox is full, where the loop lets senders wait (a bounded
    /// inbox whose policy is `suspendSender`); otherwise the same as calling the sender.
    ///
    /// For a source that reads a stream (a queue, a socket, a file): waiting for room passes the loop's
    /// pace back to the producer, and no element is dropped because the loop was busy. The event
    /// sources of `EventSources` that read streams send this way. Rejected if the loop stops, or the
    /// waiting task is cancelled, while it waits.
    @inlinable
    @discardableResult
    public func waitingForRoom(_ event: Event) async -> Delivery {
        if let wait { await wait(event) } else { deliver(event) }
    }

    /// Sends `event`; returns whether the loop accepted it.
    @inlinable
    @discardableResult
    public func callAsFunction(_ event: Event) -> Delivery {
        deliver(event)
    }

    /// A sender of another event type, whose events are turned into this one's by `transform`.
    ///
    /// Lets a handler written for a child feature's events send into its parent's loop.
    @inlinable
    public func map<Other>(_ transform: @escaping @Sendable (Other) -> Event) -> Send<Other> {
        let deliver = self.deliver
        guard let wait else { return Send<Other> { deliver(transform($0)) } }
        return Send<Other>({ deliver(transform($0)) }, waitingForRoom: { await wait(transform($0)) })
    }
}
