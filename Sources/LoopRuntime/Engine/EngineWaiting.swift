public import EffectHandlers
public import LoopCore

/// What a loop keeps for those waiting on it (senders waiting for room, tasks waiting for its start,
/// its stop, its drain or its next state, requests waiting for their reply), the events the router made
/// of failed effects and not delivered yet, and the program's start-up effects until the loop starts.
///
/// Most loops never have any, so the lists live in one object allocated the first time one is used:
/// inline they were 64 bytes of each loop's engine and 8 of the loop (w3's bytes per loop,
/// `Docs/Performance.md`). A value: a copy's lists are copied when either side changes them; emptying
/// a list that is not there allocates nothing.
@usableFromInline
struct EngineWaiting<State: Sendable, Event: Sendable, Effect: Sendable> {
    @usableFromInline
    typealias Sender = (
        id: UInt64, event: Event, origin: EventOrigin, context: CarriedContext?,
        continuation: CheckedContinuation<Delivery, Never>
    )
    @usableFromInline
    typealias StartWaiter = (id: UInt64, waiter: CheckedContinuation<Bool, Never>, untilStop: Bool)

    @usableFromInline
    final class Lists {
        @usableFromInline
        var senders: [Sender] = []
        @usableFromInline
        var startWaiters: [StartWaiter] = []
        @usableFromInline
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        @usableFromInline
        var pendingMapped = 0
        @usableFromInline
        var requests: [any PendingRequest] = []
        @usableFromInline
        var subscribers = StateSubscribers<State>()
        @usableFromInline
        var firstEffects: [Effect] = []

        @usableFromInline
        init() {}

        @usableFromInline
        init(copying other: Lists) {
            senders = other.senders
            startWaiters = other.startWaiters
            idleWaiters = other.idleWaiters
            pendingMapped = other.pendingMapped
            requests = other.requests
            subscribers = other.subscribers
            firstEffects = other.firstEffects
        }
    }

    @usableFromInline
    var lists: Lists?

    @inlinable
    init() {}

    /// Drops the lists if they hold nothing: once a loop has taken its start-up effects, say, the usual
    /// case of a durable entity, whose program starts by reading its stream.
    @inlinable
    mutating func releaseIfEmpty() {
        guard let lists, lists.senders.isEmpty, lists.startWaiters.isEmpty, lists.idleWaiters.isEmpty,
            lists.pendingMapped == 0, lists.requests.isEmpty, lists.subscribers.consumers.isEmpty,
            lists.firstEffects.isEmpty
        else { return }
        self.lists = nil
    }

    /// The lists, allocated (or copied from those another value still shares) first if needed.
    @inlinable
    mutating func unique() -> Lists {
        if isKnownUniquelyReferenced(&lists), let lists { return lists }
        let fresh = lists.map(Lists.init(copying:)) ?? Lists()
        lists = fresh
        return fresh
    }
}
