/// Where a ``LoopStates`` sequence gets its states.
protocol StateFeed<State>: Sendable {
    associatedtype State: Sendable
    func subscribe() -> UInt64
    func nextState(for id: UInt64) async -> State?
    func unsubscribe(_ id: UInt64)
}

/// A loop's states as they change: the current state first, then the latest one each time the consumer
/// asks and it has changed. Made by ``Loop/states``.
///
/// The sequence is conflating: a consumer slower than the loop skips intermediate states rather than
/// buffering them, so it holds at most one state at a time whatever the event rate. Each iterator is
/// an independent consumer. The sequence ends when the loop stops.
public struct LoopStates<State: Sendable>: AsyncSequence, Sendable {
    /// The element is a state.
    public typealias Element = State

    private let feed: any StateFeed<State>

    init(feed: any StateFeed<State>) {
        self.feed = feed
    }

    /// Starts a new consumer.
    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription: Subscription(feed: feed))
    }

    /// One consumer's position in the states.
    public struct Iterator: AsyncIteratorProtocol {
        private let subscription: Subscription

        fileprivate init(subscription: Subscription) {
            self.subscription = subscription
        }

        /// The next state not yet seen, waiting for a change; `nil` once the loop has stopped.
        public mutating func next() async -> State? {
            await subscription.feed.nextState(for: subscription.id)
        }
    }

    /// Registers a consumer for as long as its iterator exists.
    fileprivate final class Subscription: Sendable {
        let feed: any StateFeed<State>
        let id: UInt64

        init(feed: any StateFeed<State>) {
            self.feed = feed
            self.id = feed.subscribe()
        }

        deinit {
            feed.unsubscribe(id)
        }
    }
}
