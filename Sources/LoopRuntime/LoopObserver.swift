/// Receives everything a loop does, for logging, metrics and tracing.
///
/// `observe(_:)` is called synchronously, from whichever thread did the work (the thread that processed
/// an event, the task that ran an effect), possibly from several at once; it must be thread-safe and
/// quick. It is never called while the loop holds its lock, so it may call `send`, read `state`, or
/// stop the loop.
public protocol LoopObserver<Event, Effect>: Sendable {
    /// The loop's events.
    associatedtype Event: Sendable
    /// The loop's effects.
    associatedtype Effect: Sendable

    /// Called for each thing the loop did.
    func observe(_ activity: LoopActivity<Event, Effect>)
}

/// An observer that may read the loop's state as it observes, such as a journal that records a digest
/// of the state every so many events.
///
/// Give it to a ``Loop`` as its observer: the loop then calls ``observe(_:state:)`` instead of
/// ``LoopObserver/observe(_:)``. The state arrives with the activity, so the observer needs no
/// reference to the loop. Reading it is optional and costs nothing when not done: the state is not
/// copied unless `state` is called.
public protocol LoopStateObserver<State, Event, Effect>: LoopObserver {
    /// The loop's state.
    associatedtype State: Sendable

    /// Called for each thing the loop did. `state` returns the loop's state at the time of the call:
    /// while observing ``LoopActivity/eventProcessed(_:origin:duration:inboxDepth:effects:firstEffect:)``, the state right
    /// after that event, since the loop processes no other event until this returns.
    func observe(_ activity: LoopActivity<Event, Effect>, state: () -> State)
}

/// An observer made of a closure.
public struct ClosureLoopObserver<Event: Sendable, Effect: Sendable>: LoopObserver {
    private let body: @Sendable (LoopActivity<Event, Effect>) -> Void

    /// Creates an observer that passes each activity to `body`.
    public init(_ body: @escaping @Sendable (LoopActivity<Event, Effect>) -> Void) {
        self.body = body
    }

    /// Passes `activity` to the closure.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        body(activity)
    }
}

/// An observer that passes everything to several observers, in order.
///
/// ```swift
/// let loop = Loop(program: program, effects: router, observer: MulticastLoopObserver([logger, metrics]))
/// ```
public struct MulticastLoopObserver<Event: Sendable, Effect: Sendable>: LoopObserver {
    /// The observers, called in this order.
    public let observers: [any LoopObserver<Event, Effect>]

    /// Creates an observer passing each activity to every one of `observers`, in order.
    public init(_ observers: [any LoopObserver<Event, Effect>]) {
        self.observers = observers
    }

    /// Passes `activity` to every observer.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        for observer in observers { observer.observe(activity) }
    }
}

/// Receives everything the loops of a ``LoopGroup`` do, each activity with the id of the entity whose
/// loop did it.
///
/// Called as a ``LoopObserver`` is: synchronously, from whichever thread did the work, never while a lock
/// is held; it must be thread-safe and quick.
public protocol LoopGroupObserver<ID, Event, Effect>: Sendable {
    /// The entities' ids.
    associatedtype ID: Hashable & Sendable
    /// The loops' events.
    associatedtype Event: Sendable
    /// The loops' effects.
    associatedtype Effect: Sendable

    /// Called for each thing a loop of the group did; `entity` is its id, or `nil` for what the group as
    /// a whole did (``LoopActivity/stopping`` and ``LoopActivity/stopped(_:)`` of the whole group).
    func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?)
}

/// A group observer made of a closure.
public struct ClosureLoopGroupObserver<ID: Hashable & Sendable, Event: Sendable, Effect: Sendable>: LoopGroupObserver {
    private let body: @Sendable (LoopActivity<Event, Effect>, ID?) -> Void

    /// Creates an observer that passes each activity and its entity to `body`.
    public init(_ body: @escaping @Sendable (LoopActivity<Event, Effect>, ID?) -> Void) {
        self.body = body
    }

    /// Passes `activity` and `entity` to the closure.
    public func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?) {
        body(activity, entity)
    }
}

/// A group observer that passes everything to several group observers, in order.
public struct MulticastLoopGroupObserver<ID: Hashable & Sendable, Event: Sendable, Effect: Sendable>:
    LoopGroupObserver
{
    /// The observers, called in this order.
    public let observers: [any LoopGroupObserver<ID, Event, Effect>]

    /// Creates an observer passing each activity to every one of `observers`, in order.
    public init(_ observers: [any LoopGroupObserver<ID, Event, Effect>]) {
        self.observers = observers
    }

    /// Passes `activity` and `entity` to every observer.
    public func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?) {
        for observer in observers { observer.observe(activity, of: entity) }
    }
}
