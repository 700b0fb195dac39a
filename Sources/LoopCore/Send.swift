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

    /// Creates a sender that hands each event to `deliver`.
    @inlinable
    public init(_ deliver: @escaping @Sendable (Event) -> Delivery) {
        self.deliver = deliver
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
        Send<Other> { deliver(transform($0)) }
    }
}
