public import LoopCore

/// A source that sends each element of an asynchronous sequence: a stream of messages, a channel, the
/// output of another component.
///
/// The source ends when the sequence ends, and throws what the sequence throws. It also ends early when
/// the loop stops taking events.
public struct AsyncSequenceSource<Base: AsyncSequence & Sendable>: EventSource where Base.Element: Sendable {
    /// The events are the sequence's elements.
    public typealias Event = Base.Element

    private let base: Base

    /// Creates a source that sends every element of `base`.
    public init(_ base: Base) {
        self.base = base
    }

    /// Sends each element until the sequence ends or the loop stops.
    public func run(send: Send<Event>) async throws {
        for try await element in base {
            if case .rejected(let rejection) = send(element), rejection != .inboxFull { return }
        }
    }
}
