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

extension LoopStates {
    /// A projection of the states that yields only when the projection changes: what a view, a
    /// connection or a subscriber of one field of the state wants.
    ///
    /// ```swift
    /// for await running in loop.states.scoped({ $0.jobs.values.count(where: \.status.isRunning) }) {
    ///     gauge.set(running)          // only when the count changes
    /// }
    /// ```
    ///
    /// Conflating like the states themselves: a slow consumer skips intermediate values, and holds at
    /// most one state and one value at a time; the projection runs on the consumer's task, never in the
    /// loop.
    public func scoped<Value: Equatable & Sendable>(
        _ projection: @escaping @Sendable (State) -> Value
    ) -> ScopedStates<State, Value> {
        ScopedStates(states: self, projection: projection)
    }
}

extension LoopStates where State: Equatable {
    /// The states, each only when it differs from the one before.
    public func removingDuplicates() -> ScopedStates<State, State> {
        scoped { $0 }
    }
}

/// A projection of a loop's states, each value only when it changed. Made by ``LoopStates/scoped(_:)``.
public struct ScopedStates<State: Sendable, Value: Equatable & Sendable>: AsyncSequence, Sendable {
    /// The element is a projected value.
    public typealias Element = Value

    let states: LoopStates<State>
    let projection: @Sendable (State) -> Value

    /// Starts a new consumer.
    public func makeAsyncIterator() -> Iterator {
        Iterator(base: states.makeAsyncIterator(), projection: projection)
    }

    /// One consumer's position.
    public struct Iterator: AsyncIteratorProtocol {
        var base: LoopStates<State>.Iterator
        let projection: @Sendable (State) -> Value
        var last: Value?

        /// The next value that differs from the last one yielded; `nil` once the loop has stopped.
        public mutating func next() async -> Value? {
            while let state = await base.next() {
                let value = projection(state)
                if value != last {
                    last = value
                    return value
                }
            }
            return nil
        }
    }
}
