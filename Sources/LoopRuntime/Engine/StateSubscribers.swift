/// The consumers of a loop's state stream and the version of the state each has seen. A value kept
/// inside ``LoopEngine``.
@usableFromInline
struct StateSubscribers<State: Sendable> {
    @usableFromInline
    struct Subscriber {
        @usableFromInline
        var seen: UInt64
        @usableFromInline
        var waiter: CheckedContinuation<State?, Never>?

        @inlinable
        init(seen: UInt64, waiter: CheckedContinuation<State?, Never>?) {
            self.seen = seen
            self.waiter = waiter
        }
    }

    /// What a consumer gets when it asks for the next state.
    @usableFromInline
    enum Poll {
        /// The state changed since it last looked; it gets the current one.
        case changed
        /// The stream has ended.
        case finished
        /// Nothing new: it waits.
        case wait
    }

    /// Counts processed events, so a consumer knows whether it has seen the current state.
    @usableFromInline
    var version: UInt64 = 0
    @usableFromInline
    var consumers: [UInt64: Subscriber] = [:]
    /// How many consumers are parked waiting for a change.
    @usableFromInline
    var parked = 0

    @inlinable
    init() {}

    /// A new consumer, which has not seen the current state.
    @inlinable
    mutating func subscribe(_ id: UInt64) {
        consumers[id] = Subscriber(seen: version &- 1, waiter: nil)
    }

    /// Whether `id` has something new; marks it seen.
    @inlinable
    mutating func poll(_ id: UInt64, ended: Bool) -> Poll {
        guard var consumer = consumers[id] else { return .finished }
        if consumer.seen != version {
            consumer.seen = version
            consumers[id] = consumer
            return .changed
        }
        if ended {
            consumers[id] = nil
            return .finished
        }
        return .wait
    }

    /// Parks `id` until the next change.
    @inlinable
    mutating func park(_ id: UInt64, _ waiter: CheckedContinuation<State?, Never>) {
        consumers[id]?.waiter = waiter
        parked += 1
    }

    /// Removes `id`; its waiter, if it was parked.
    @inlinable
    mutating func unsubscribe(_ id: UInt64) -> CheckedContinuation<State?, Never>? {
        let waiter = consumers.removeValue(forKey: id)?.waiter
        if waiter != nil { parked -= 1 }
        return waiter
    }

    /// The state changed: takes every parked waiter, marking the new version seen.
    @inlinable
    mutating func changed() -> [CheckedContinuation<State?, Never>] {
        version &+= 1
        var waiters: [CheckedContinuation<State?, Never>] = []
        for (id, consumer) in consumers {
            guard let waiter = consumer.waiter else { continue }
            waiters.append(waiter)
            consumers[id] = Subscriber(seen: version, waiter: nil)
        }
        parked = 0
        return waiters
    }

    /// The loop stopped: takes every parked waiter; their streams end.
    @inlinable
    mutating func end() -> [CheckedContinuation<State?, Never>] {
        var waiters: [CheckedContinuation<State?, Never>] = []
        for (id, consumer) in consumers {
            if let waiter = consumer.waiter {
                waiters.append(waiter)
                consumers[id]?.waiter = nil
            }
        }
        parked = 0
        return waiters
    }
}

/// What a state-stream consumer gets without waiting: a state it has not seen, or the end of the states.
@usableFromInline
enum StatePoll<State> {
    case state(State)
    case finished
}
