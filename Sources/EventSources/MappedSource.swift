public import LoopCore

/// A source whose events are those of another, transformed. Made by ``EventSource/map(_:)``.
public struct MappedSource<Base: EventSource, Event: Sendable>: EventSource {
    private let base: Base
    private let transform: @Sendable (Base.Event) -> Event

    /// Creates a source that sends `transform` of each event of `base`.
    public init(_ base: Base, _ transform: @escaping @Sendable (Base.Event) -> Event) {
        self.base = base
        self.transform = transform
    }

    /// Runs the base source, transforming its events.
    public func run(send: Send<Event>) async throws {
        try await base.run(send: send.map(transform))
    }
}
