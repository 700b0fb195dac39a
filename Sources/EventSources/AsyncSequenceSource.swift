public import LoopCore

/// A source that sends each element of an asynchronous sequence: a stream of messages, a channel, the
/// output of another component.
///
/// The source ends when the sequence ends, and throws what the sequence throws. It also ends early when
/// the loop stops taking events.
///
/// It takes the next element only once the loop has taken the last one: with a bounded inbox whose
/// policy is `suspendSender`, it waits for room (``/LoopCore/Send/waitingForRoom(_:)``), so a fast
/// sequence is read at the loop's pace and loses nothing. With `rejectNewest`, an element that finds the
/// inbox full is rejected as the policy says (counted and reported to the observer) and the source goes
/// on.
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
            if case .rejected(let rejection) = await send.waitingForRoom(element),
                rejection != .inboxFull || Task.isCancelled
            {
                return
            }
        }
    }
}
