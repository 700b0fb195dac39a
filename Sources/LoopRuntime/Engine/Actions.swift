public import EffectHandlers
public import LoopCore
public import Synchronization

/// An event in the inbox, with where it came from.
@usableFromInline
struct Envelope<Event> {
    @usableFromInline
    var event: Event
    @usableFromInline
    var origin: EventOrigin
    /// What the router's ``/EffectHandlers/EffectScope`` captured where the event was sent.
    @usableFromInline
    var context: CarriedContext?

    @inlinable
    init(_ event: Event, from origin: EventOrigin, context: CarriedContext? = nil) {
        self.event = event
        self.origin = origin
        self.context = context
    }
}

/// Cancels one running effect's task. Equal by the effect's id, so actions holding handles compare as
/// values in tests.
@usableFromInline
struct CancelHandle: Sendable, Equatable {
    @usableFromInline
    let id: UInt64
    @usableFromInline
    let cancel: @Sendable () -> Void

    @inlinable
    init(id: UInt64, cancel: @escaping @Sendable () -> Void) {
        self.id = id
        self.cancel = cancel
    }

    @inlinable
    static func == (lhs: CancelHandle, rhs: CancelHandle) -> Bool { lhs.id == rhs.id }
}

/// An effect with its id (an ``EffectID``'s number), as the engine hands it out for reporting: one
/// cancelled, abandoned or dropped.
@usableFromInline
struct IdentifiedEffect<Effect: Sendable>: Sendable {
    @usableFromInline
    var id: UInt64
    @usableFromInline
    var effect: Effect

    @inlinable
    init(_ id: UInt64, _ effect: Effect) {
        self.id = id
        self.effect = effect
    }
}

extension IdentifiedEffect: Equatable where Effect: Equatable {}

/// An asynchronous effect the engine let in: what its task runs. Equal by id, effect and lifecycle.
@usableFromInline
struct Admitted<Effect: Sendable, Event: Sendable>: Sendable {
    @usableFromInline
    var id: UInt64
    @usableFromInline
    var effect: Effect
    @usableFromInline
    var lifecycle: EffectLifecycle
    @usableFromInline
    var perform: @Sendable (Effect, Send<Event>) async throws -> Void
    /// For an effect whose route completes it (``EffectRouter/Performer/completing(_:)``): how to start
    /// it without a task, when it is not controlled.
    @usableFromInline
    var start: (@Sendable (Effect, Send<Event>, @escaping EffectRouter<Effect, Event>.Completion) -> Void)?

    @inlinable
    init(
        id: UInt64,
        effect: Effect,
        lifecycle: EffectLifecycle,
        perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void,
        start: (@Sendable (Effect, Send<Event>, @escaping EffectRouter<Effect, Event>.Completion) -> Void)? = nil
    ) {
        self.id = id
        self.effect = effect
        self.lifecycle = lifecycle
        self.perform = perform
        self.start = start
    }

    /// Whether the loop can cancel it on its own or time it out, so its handler runs in a task of its own.
    @inlinable
    var isControlled: Bool { lifecycle.key != nil || lifecycle.timeout != nil || lifecycle.delay != nil }
}

extension Admitted: Equatable where Effect: Equatable {
    @inlinable
    static func == (lhs: Admitted, rhs: Admitted) -> Bool {
        lhs.id == rhs.id && lhs.effect == rhs.effect && lhs.lifecycle == rhs.lifecycle
    }
}

/// What the engine decided for one effect it looked at in the lock (an asynchronous one, or one that
/// cancels a key). Synchronous and unrouted effects need no decision: the driver runs or reports them.
@usableFromInline
enum Admission<Effect: Sendable, Event: Sendable> {
    /// Start it: first call `cancelling` (a `latest` effect replaces those with its key) and report
    /// `cancelled`, queued effects that now never start.
    case start(Admitted<Effect, Event>, cancelling: [CancelHandle], cancelled: [IdentifiedEffect<Effect>])
    /// It waits behind the running effect with its key; it starts when that one ends.
    case queued
    /// Dropped: an effect with its key is running (`dropIfRunning`).
    case dropped
    /// A `cancel` effect: call `cancelling`, report `cancelled`; the effect itself starts nothing.
    case cancel(cancelling: [CancelHandle], cancelled: [IdentifiedEffect<Effect>])
    /// A throttled effect that starts now and opens an interval of its key: start it, and end the
    /// interval after `interval` (``LoopEngine/intervalEnded(_:)``).
    case throttled(Admitted<Effect, Event>, interval: Duration)
    /// A throttled effect that waits for the end of its key's interval; it replaced `replacing`, which
    /// was waiting and is now dropped.
    case held(replacing: IdentifiedEffect<Effect>?)
}

extension Admission: Equatable where Effect: Equatable {}

/// One decision, and the position in the event's effects of the effect it is for.
@usableFromInline
struct Decision<Effect: Sendable, Event: Sendable> {
    @usableFromInline
    var index: Int
    @usableFromInline
    var admission: Admission<Effect, Event>

    @inlinable
    init(_ index: Int, _ admission: Admission<Effect, Event>) {
        self.index = index
        self.admission = admission
    }
}

extension Decision: Equatable where Effect: Equatable {}

/// The decisions the engine took for the effects of one event, and the host that runs those it starts.
/// A reference, allocated only for an event with an asynchronous effect or a cancel, so a step of
/// synchronous effects stays small.
@usableFromInline
final class Decisions<Effect: Sendable, Event: Sendable> {
    @usableFromInline
    var list: [Decision<Effect, Event>]
    @usableFromInline
    let host: Host?

    @inlinable
    init(_ list: [Decision<Effect, Event>], host: Host?) {
        self.list = list
        self.host = host
    }
}

/// The effects of one event (or of the program's start), with the decisions the engine took for them
/// in the same hold of the lock as the update. The driver goes through `effects` in order: an effect
/// with a decision follows it; any other is synchronous (run inline) or unrouted (reported failed).
/// The effect at offset `n` has id `firstID + n`.
@usableFromInline
struct Dispatch<Effect: Sendable, Event: Sendable> {
    @usableFromInline
    var effects: [Effect]
    @usableFromInline
    var decided: Decisions<Effect, Event>?
    /// The id of the first effect; the others' follow.
    @usableFromInline
    var firstID: UInt64

    @inlinable
    init(effects: [Effect] = [], firstID: UInt64 = 0, decided: Decisions<Effect, Event>? = nil) {
        self.effects = effects
        self.firstID = firstID
        self.decided = decided
    }

    @inlinable
    init(effects: [Effect], firstID: UInt64, decisions: [Decision<Effect, Event>], host: Host?) {
        self.effects = effects
        self.firstID = firstID
        self.decided = decisions.isEmpty ? nil : Decisions(decisions, host: host)
    }

    @inlinable
    var isEmpty: Bool { effects.isEmpty }

    /// The decisions, in effect order.
    @inlinable
    var decisions: [Decision<Effect, Event>] { decided?.list ?? [] }

    /// The host that runs the effects it starts.
    @inlinable
    var host: Host? { decided?.host }
}

extension Dispatch: Equatable where Effect: Equatable {
    /// Equal when the same effects, ids, decisions and host.
    @inlinable
    static func == (lhs: Dispatch, rhs: Dispatch) -> Bool {
        lhs.effects == rhs.effects && lhs.firstID == rhs.firstID && lhs.decisions == rhs.decisions
            && lhs.host === rhs.host
    }
}

/// Who to wake after a step: state-stream consumers waiting for the next state (with that state), and
/// an async sender whose event took the room the step freed.
@usableFromInline
final class Wakeups<State: Sendable> {
    @usableFromInline
    var subscribers: [CheckedContinuation<State?, Never>] = []
    @usableFromInline
    var state: State?
    @usableFromInline
    var admittedSender: CheckedContinuation<Delivery, Never>?

    @usableFromInline
    init() {}

    /// Resumes everyone; call after the lock is released.
    @usableFromInline
    func resume() {
        if let state {
            for subscriber in subscribers { subscriber.resume(returning: state) }
        }
        admittedSender?.resume(returning: .accepted)
    }
}

/// One processed event: what the driver reports and does once the lock is released.
///
/// Kept to fixed-layout fields so the hot path copies it without runtime calls; the rare wake-ups live
/// behind one optional reference.
@usableFromInline
struct Step<State: Sendable, Event: Sendable, Effect: Sendable> {
    @usableFromInline
    var event: Event
    @usableFromInline
    var origin: EventOrigin
    @usableFromInline
    var dispatch: Dispatch<Effect, Event>
    @usableFromInline
    var duration: Duration?
    @usableFromInline
    var inboxDepth: Int
    @usableFromInline
    var wakeups: Wakeups<State>?
    /// The context carried with the event, for the scope its synchronous effects run in.
    @usableFromInline
    var context: CarriedContext?

    @inlinable
    init(
        event: Event,
        origin: EventOrigin,
        dispatch: Dispatch<Effect, Event>,
        duration: Duration?,
        inboxDepth: Int,
        wakeups: Wakeups<State>? = nil,
        context: CarriedContext? = nil
    ) {
        self.event = event
        self.origin = origin
        self.dispatch = dispatch
        self.duration = duration
        self.inboxDepth = inboxDepth
        self.wakeups = wakeups
        self.context = context
    }
}

extension Step: Equatable where Event: Equatable, Effect: Equatable {
    /// Equal when the same event, origin, effects and decisions; timing and wake-ups are not compared.
    @inlinable
    static func == (lhs: Step, rhs: Step) -> Bool {
        lhs.event == rhs.event && lhs.origin == rhs.origin && lhs.dispatch == rhs.dispatch
            && lhs.inboxDepth == rhs.inboxDepth
    }
}

/// Everything to do once a loop has stopped: who to release, what to report, the host to leave.
@usableFromInline
struct Finish<State: Sendable, Event: Sendable, Effect: Sendable> {
    /// How the loop stopped.
    @usableFromInline
    var ending: LoopReport.Ending
    /// The host the loop leaves, if it ran on one.
    @usableFromInline
    var host: Host?
    /// Events taken but never processed.
    @usableFromInline
    var dropped: [Event] = []
    /// Queued effects that now never start.
    @usableFromInline
    var cancelled: [IdentifiedEffect<Effect>] = []
    /// Effects still running, which the loop cancels and no longer waits for.
    @usableFromInline
    var abandoned: [IdentifiedEffect<Effect>] = []
    /// The cancel handles of the abandoned effects that run in tasks of their own.
    @usableFromInline
    var cancelling: [CancelHandle] = []
    /// Async senders still waiting for room, with their events, turned away: the loop has stopped.
    @usableFromInline
    var senders: [TurnedAway<Event>] = []
    /// State-stream consumers waiting for a change: their streams end.
    @usableFromInline
    var subscribers: [CheckedContinuation<State?, Never>] = []
    /// Tasks waiting for the loop to start (it never will) or to stop (it has).
    @usableFromInline
    var startWaiters: [CheckedContinuation<Bool, Never>] = []
    /// Tasks waiting for the loop to be idle: it is, for good.
    @usableFromInline
    var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Requests the loop took: those still without a reply fail, the loop has stopped.
    @usableFromInline
    var requests: [any PendingRequest] = []

    @inlinable
    init(ending: LoopReport.Ending, host: Host?) {
        self.ending = ending
        self.host = host
    }
}

extension Finish: Equatable where Event: Equatable, Effect: Equatable {
    /// Equal when the same ending, host, dropped, cancelled and abandoned effects, and the same numbers
    /// of handles and waiters.
    @inlinable
    static func == (lhs: Finish, rhs: Finish) -> Bool {
        lhs.ending == rhs.ending && lhs.host === rhs.host && lhs.dropped == rhs.dropped
            && lhs.cancelled == rhs.cancelled && lhs.abandoned == rhs.abandoned
            && lhs.cancelling == rhs.cancelling && lhs.senders.count == rhs.senders.count
            && lhs.subscribers.count == rhs.subscribers.count
            && lhs.startWaiters.count == rhs.startWaiters.count
    }
}

/// An async sender turned away while it waited for room, with its event (for the observer).
@usableFromInline
struct TurnedAway<Event: Sendable> {
    @usableFromInline
    var event: Event
    @usableFromInline
    var sender: CheckedContinuation<Delivery, Never>

    @inlinable
    init(event: Event, sender: CheckedContinuation<Delivery, Never>) {
        self.event = event
        self.sender = sender
    }
}

/// Tells the first call from the later ones, on any thread: a completion resumes its continuation once.
@usableFromInline
final class FirstCall: Sendable {
    @usableFromInline let called = Atomic<Bool>(false)

    @inlinable
    init() {}

    /// `true` the first time only.
    @inlinable
    func isFirst() -> Bool {
        !called.exchange(true, ordering: .acquiringAndReleasing)
    }
}

/// The synchronous effects (and unrouted ones) that ended while the drain baton's holder took a step:
/// the holder counts them as it goes, and hands them to the engine at its next call (``LoopEngine/nextStep(counting:)``),
/// so the report is the engine's alone and a synchronous effect costs no lock or atomic operation of its own.
@usableFromInline
struct SyncTally: Equatable {
    @usableFromInline var completed = 0
    @usableFromInline var failed = 0

    @inlinable
    init() {}

    /// Whether nothing ended.
    @inlinable
    var isEmpty: Bool { completed == 0 && failed == 0 }

    /// Counts one effect that ended; such an effect counts as started once it has ended.
    @inlinable
    mutating func count(completed: Bool) {
        if completed { self.completed += 1 } else { failed += 1 }
    }
}
