public import LoopCore

/// A type that turns something of the outside world into events: a timer, a signal, a queue, a socket,
/// the lines of standard input.
///
/// The loop calls ``run(send:)`` once, in a task of its own, when it starts. The source sends events
/// until it is exhausted (it returns) or cancelled (the loop stops). A source that throws is reported
/// to the loop's observer; the loop keeps running.
public protocol EventSource<Event>: Sendable {
    /// The events this source produces.
    associatedtype Event: Sendable

    /// Produces events through `send` until exhausted or cancelled.
    func run(send: Send<Event>) async throws
}

/// An event source made of a closure.
public struct ClosureEventSource<Event: Sendable>: EventSource {
    private let body: @Sendable (Send<Event>) async throws -> Void

    /// Creates a source that runs `body`.
    public init(_ body: @escaping @Sendable (Send<Event>) async throws -> Void) {
        self.body = body
    }

    /// Runs the closure.
    public func run(send: Send<Event>) async throws {
        try await body(send)
    }
}

extension EventSource {
    /// This source with each of its events turned into another by `transform`.
    public func map<Other: Sendable>(_ transform: @escaping @Sendable (Event) -> Other) -> MappedSource<Self, Other> {
        MappedSource(self, transform)
    }
}
