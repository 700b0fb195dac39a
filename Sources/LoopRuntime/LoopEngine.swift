public import EffectHandlers
public import LoopCore

/// Where a loop is in its life.
@usableFromInline
enum Phase: Equatable {
    /// Created, not yet running: events are queued, not processed.
    case idle
    /// Running: events are processed as they arrive.
    case running
    /// Graceful shutdown: no events from outside; queued events and effect results are still processed.
    case stopping
    /// Graceful shutdown past its deadline: effects are being cancelled; no events are taken.
    case cancelling
    /// Stopped: nothing is taken or processed.
    case stopped
}

/// Where an event came from: the outside world, or the loop's own effects.
@usableFromInline
enum Origin {
    case outside
    case inside
}

/// One processed event: what the loop reports and does once the lock is released.
///
/// Kept to fixed-layout fields so the hot path copies it without runtime calls; the rare wake-ups
/// (state-stream consumers, an admitted async sender) live behind one optional reference.
@usableFromInline
struct Step<State: Sendable, Event, Effect> {
    @usableFromInline
    var event: Event
    @usableFromInline
    var effects: [Effect]
    @usableFromInline
    var duration: Duration?
    @usableFromInline
    var inboxDepth: Int
    @usableFromInline
    var wakeups: Wakeups<State>?

    @inlinable
    init(event: Event, effects: [Effect], duration: Duration?, inboxDepth: Int) {
        self.event = event
        self.effects = effects
        self.duration = duration
        self.inboxDepth = inboxDepth
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

/// An asynchronous effect waiting for its turn behind another with the same key.
@usableFromInline
struct QueuedEffect<Effect: Sendable, Event: Sendable>: Sendable {
    @usableFromInline
    var id: UInt64
    @usableFromInline
    var effect: Effect
    @usableFromInline
    var lifecycle: EffectLifecycle
    @usableFromInline
    var perform: @Sendable (Effect, Send<Event>) async throws -> Void

    @inlinable
    init(
        id: UInt64,
        effect: Effect,
        lifecycle: EffectLifecycle,
        perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void
    ) {
        self.id = id
        self.effect = effect
        self.lifecycle = lifecycle
        self.perform = perform
    }
}

/// How an asynchronous effect is let in.
@usableFromInline
enum Admission<Effect: Sendable, Event: Sendable> {
    /// Start it now under `id`; first cancel `cancelling` and report `cancelledQueued` as cancelled.
    case start(id: UInt64, cancelling: [@Sendable () -> Void], cancelledQueued: [Effect])
    /// It waits behind another effect with its key.
    case queued
    /// Dropped: one with its key is in flight.
    case dropped
    /// The loop is past taking effects; it counts as cancelled.
    case refused
}

/// How an asynchronous effect ended.
@usableFromInline
enum EffectOutcome: Sendable {
    case completed
    case failed(any Error)
    case cancelled
    case timedOut(Duration)
}

/// The loop's whole mutable state, kept behind one lock: a value-type state machine whose methods
/// decide, and return what the caller must do after releasing the lock.
@usableFromInline
struct LoopEngine<State: Sendable, Event: Sendable, Effect: Sendable> {
    /// Bookkeeping for an effect that can be cancelled on its own (it has a key or a timeout).
    @usableFromInline
    struct Controlled {
        @usableFromInline
        var key: EffectKey?
        @usableFromInline
        var cancel: (@Sendable () -> Void)?
        @usableFromInline
        var cancelRequested = false
        @usableFromInline
        var timedOut: Duration?

        @inlinable
        init(key: EffectKey?) {
            self.key = key
        }
    }

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

    @usableFromInline
    var machine: Machine<State, Event, Effect>
    @usableFromInline
    let policy: InboxPolicy
    @usableFromInline
    let timed: Bool
    @usableFromInline
    var phase = Phase.idle
    @usableFromInline
    var inbox = Inbox<Event>()
    @usableFromInline
    var draining = false
    @usableFromInline
    var report = LoopReport()
    @usableFromInline
    var host: Host?
    @usableFromInline
    var leftHost = false

    @usableFromInline
    var nextID: UInt64 = 0
    @usableFromInline
    var inFlight = 0
    @usableFromInline
    var controlled: [UInt64: Controlled] = [:]
    @usableFromInline
    var activeByKey: [EffectKey: [UInt64]] = [:]
    @usableFromInline
    var queuedByKey: [EffectKey: Inbox<QueuedEffect<Effect, Event>>] = [:]
    @usableFromInline
    var queuedCount = 0

    @usableFromInline
    var waitingSenders: [(id: UInt64, event: Event, continuation: CheckedContinuation<Delivery, Never>)] = []
    @usableFromInline
    var subscribers: [UInt64: Subscriber] = [:]
    @usableFromInline
    var version: UInt64 = 0

    @inlinable
    init(machine: Machine<State, Event, Effect>, policy: InboxPolicy, timed: Bool) {
        self.machine = machine
        self.policy = policy
        self.timed = timed
    }

    // MARK: Events

    @usableFromInline
    enum Reception {
        case rejected(Rejection)
        case queued
        case droppedOldest(Event)
        case process(Step<State, Event, Effect>)
        /// Processed completely inside the lock: no effects, no observer, nobody to wake.
        case processed
    }

    /// Takes `event` into the inbox, or, when nothing else is being processed, processes it at once.
    @inlinable
    mutating func receive(_ event: Event, from origin: Origin) -> Reception {
        report.eventsSent += 1
        if let rejection = rejection(from: origin) {
            report.eventsRejected += 1
            return .rejected(rejection)
        }
        if let capacity = policy.capacity, inbox.count >= capacity {
            switch policy.overflow {
            case .rejectNewest, .suspendSender:
                report.eventsRejected += 1
                return .rejected(.inboxFull)
            case .dropOldest:
                let oldest = inbox.popFirst()
                inbox.append(event)
                if let oldest {
                    report.eventsDropped += 1
                    return .droppedOldest(oldest)
                }
                return .queued
            }
        }
        if !draining && inbox.isEmpty && (phase == .running || phase == .stopping) {
            draining = true
            let step = process(event)
            if step.effects.isEmpty && step.duration == nil && step.wakeups == nil && phase == .running {
                // Nothing to do outside the lock, and the inbox is still empty: the drain ends here.
                draining = false
                return .processed
            }
            return .process(step)
        }
        inbox.append(event)
        return .queued
    }

    /// Why an event from `origin` is turned away now, if it is.
    @inlinable
    func rejection(from origin: Origin) -> Rejection? {
        switch phase {
        case .idle, .running: nil
        case .stopping: origin == .outside ? .stopping : nil
        case .cancelling: .stopping
        case .stopped: .stopped
        }
    }

    /// For an async sender of `event` to a full suspending inbox: whether it must wait.
    @inlinable
    mutating func mustWait(for event: Event) -> Bool {
        guard let capacity = policy.capacity, policy.overflow == .suspendSender else { return false }
        return rejection(from: .outside) == nil && inbox.count >= capacity
    }

    @inlinable
    mutating func enqueueWaitingSender(
        _ id: UInt64,
        _ event: Event,
        _ continuation: CheckedContinuation<Delivery, Never>
    ) {
        waitingSenders.append((id, event, continuation))
    }

    /// Removes a waiting sender that gave up; its continuation, if it was still waiting.
    @inlinable
    mutating func removeWaitingSender(_ id: UInt64) -> CheckedContinuation<Delivery, Never>? {
        guard let index = waitingSenders.firstIndex(where: { $0.id == id }) else { return nil }
        report.eventsSent += 1
        report.eventsRejected += 1
        return waitingSenders.remove(at: index).continuation
    }

    /// How many events that leave nothing to do outside the lock are processed in one hold of it, so a
    /// concurrent sender never waits behind a long batch.
    @usableFromInline
    static var batchLimit: Int { 64 }

    /// What the drainer does next.
    @usableFromInline
    enum Next {
        /// Report this step and start its effects, then ask again.
        case step(Step<State, Event, Effect>)
        /// Events were processed completely; release the lock and ask again.
        case again
        /// The inbox is empty: the drain has ended.
        case idle
    }

    /// Processes queued events: those that leave nothing to do outside the lock in a batch, stopping at
    /// the first that does (returned as a step), at the batch limit, or when the inbox is empty, which
    /// ends the drain.
    @inlinable
    mutating func nextStep() -> Next {
        var processed = 0
        while phase == .running || phase == .stopping, let event = inbox.popFirst() {
            var step = process(event)
            if !waitingSenders.isEmpty, rejection(from: .outside) == nil {
                let waiting = waitingSenders.removeFirst()
                report.eventsSent += 1
                inbox.append(waiting.event)
                let wakeups = step.wakeups ?? Wakeups()
                wakeups.admittedSender = waiting.continuation
                step.wakeups = wakeups
            }
            if !step.effects.isEmpty || step.duration != nil || step.wakeups != nil { return .step(step) }
            processed += 1
            if processed == Self.batchLimit { return .again }
        }
        draining = false
        return .idle
    }

    @inlinable
    mutating func process(_ event: Event) -> Step<State, Event, Effect> {
        let effects: [Effect]
        var duration: Duration?
        if timed {
            let start = ContinuousClock.now
            effects = machine.process(event)
            duration = ContinuousClock.now - start
        } else {
            effects = machine.process(event)
        }
        report.eventsProcessed += 1
        version &+= 1
        var step = Step<State, Event, Effect>(
            event: event,
            effects: effects,
            duration: duration,
            inboxDepth: inbox.count
        )
        if !subscribers.isEmpty { collectSubscribers(into: &step) }
        return step
    }

    // MARK: Lifecycle

    /// Whether shutdown has nothing left to wait for.
    @inlinable
    var isQuiescent: Bool {
        (phase == .stopping || phase == .cancelling) && inbox.isEmpty && !draining && inFlight == 0
            && queuedCount == 0
    }

    /// The host to leave, once, when shutdown has nothing left to wait for.
    @inlinable
    mutating func hostToLeave() -> Host? {
        guard isQuiescent, !leftHost, let host else { return nil }
        leftHost = true
        return host
    }

    /// Turns away every async sender still waiting for room.
    @inlinable
    mutating func rejectWaitingSenders() -> [CheckedContinuation<Delivery, Never>] {
        let waiting = waitingSenders
        waitingSenders = []
        report.eventsSent += waiting.count
        report.eventsRejected += waiting.count
        return waiting.map(\.continuation)
    }

    /// Drops every queued event (an immediate stop), returning them for the observer.
    @inlinable
    mutating func dropQueuedEvents() -> [Event] {
        let dropped = inbox.removeAll()
        report.eventsDropped += dropped.count
        return dropped
    }

    // MARK: Effects

    /// Counts a synchronous effect as started.
    @inlinable
    mutating func startSync() {
        report.effectsStarted += 1
    }

    /// Lets an asynchronous effect in according to its lifecycle.
    @inlinable
    mutating func admit(
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void
    ) -> Admission<Effect, Event> {
        guard phase == .running || phase == .stopping else {
            report.effectsCancelled += 1
            return .refused
        }
        var cancelling: [@Sendable () -> Void] = []
        var cancelledQueued: [Effect] = []
        if let key = lifecycle.key {
            let busy = !(activeByKey[key] ?? []).isEmpty || !(queuedByKey[key]?.isEmpty ?? true)
            switch lifecycle.policy {
            case .serial where busy:
                nextID &+= 1
                queuedByKey[key, default: Inbox()]
                    .append(QueuedEffect(id: nextID, effect: effect, lifecycle: lifecycle, perform: perform))
                queuedCount += 1
                return .queued
            case .dropIfRunning where busy:
                report.effectsDropped += 1
                return .dropped
            case .latest:
                (cancelling, cancelledQueued) = cancel(key)
            default:
                break
            }
        }
        nextID &+= 1
        begin(nextID, lifecycle)
        return .start(id: nextID, cancelling: cancelling, cancelledQueued: cancelledQueued)
    }

    @inlinable
    mutating func begin(_ id: UInt64, _ lifecycle: EffectLifecycle) {
        inFlight += 1
        report.effectsStarted += 1
        if lifecycle.key != nil || lifecycle.timeout != nil {
            controlled[id] = Controlled(key: lifecycle.key)
        }
        if let key = lifecycle.key { activeByKey[key, default: []].append(id) }
    }

    /// Cancels every effect with `key`: returns the cancel handles of those running and the queued
    /// ones, which never start.
    @inlinable
    mutating func cancel(_ key: EffectKey) -> ([@Sendable () -> Void], [Effect]) {
        var handles: [@Sendable () -> Void] = []
        for id in activeByKey[key] ?? [] {
            guard var entry = controlled[id], !entry.cancelRequested, entry.timedOut == nil else { continue }
            entry.cancelRequested = true
            if let cancel = entry.cancel { handles.append(cancel) }
            controlled[id] = entry
        }
        var waiting = queuedByKey.removeValue(forKey: key) ?? Inbox()
        let queued = waiting.removeAll()
        queuedCount -= queued.count
        report.effectsCancelled += queued.count
        return (handles, queued.map(\.effect))
    }

    /// Cancels every effect in flight or queued (shutdown past its deadline); the queued ones never start.
    @inlinable
    mutating func cancelEverything() -> [Effect] {
        var cancelled: [Effect] = []
        for key in Array(queuedByKey.keys) {
            cancelled += cancel(key).1
        }
        return cancelled
    }

    /// Records the task's cancel handle; `false` when cancellation was already asked for, in which case
    /// the caller cancels at once.
    @inlinable
    mutating func attach(_ id: UInt64, cancel: @escaping @Sendable () -> Void) -> Bool {
        guard var entry = controlled[id] else { return true }
        entry.cancel = cancel
        controlled[id] = entry
        return !entry.cancelRequested
    }

    /// Marks an effect as timed out; its cancel handle, if it is still running and not yet cancelled.
    @inlinable
    mutating func timeOut(_ id: UInt64, after timeout: Duration) -> (@Sendable () -> Void)? {
        guard var entry = controlled[id], !entry.cancelRequested, entry.timedOut == nil else { return nil }
        entry.timedOut = timeout
        controlled[id] = entry
        return entry.cancel
    }

    /// Whether the effect `id` should not start at all (it was cancelled while waiting to start).
    @inlinable
    func isCancelled(_ id: UInt64) -> Bool {
        controlled[id]?.cancelRequested ?? false
    }

    /// How an effect's run ends once the loop's own decisions are counted: a timeout or a cancellation
    /// the loop asked for outweighs what the handler did.
    @inlinable
    func resolve(_ id: UInt64, _ result: EffectOutcome) -> EffectOutcome {
        if let timeout = controlled[id]?.timedOut { return .timedOut(timeout) }
        if controlled[id]?.cancelRequested == true { return .cancelled }
        return result
    }

    /// Records how an asynchronous effect ended (as resolved); returns the next queued effect with its key, now
    /// started, if any.
    @inlinable
    mutating func finish(
        _ id: UInt64,
        _ lifecycle: EffectLifecycle,
        _ outcome: EffectOutcome
    ) -> QueuedEffect<Effect, Event>? {
        controlled[id] = nil
        inFlight -= 1
        switch outcome {
        case .completed: report.effectsCompleted += 1
        case .failed: report.effectsFailed += 1
        case .timedOut: report.effectsTimedOut += 1
        case .cancelled:
            report.effectsCancelled += 1
            report.effectsCancelledAfterStart += 1
        }
        guard let key = lifecycle.key else { return nil }
        activeByKey[key]?.removeAll { $0 == id }
        if activeByKey[key]?.isEmpty == true { activeByKey[key] = nil }
        guard activeByKey[key] == nil, let next = queuedByKey[key]?.popFirst() else { return nil }
        if queuedByKey[key]?.isEmpty == true { queuedByKey[key] = nil }
        queuedCount -= 1
        guard phase == .running || phase == .stopping else {
            report.effectsCancelled += 1
            return nil
        }
        begin(next.id, next.lifecycle)
        return next
    }

    // MARK: State stream

    @inlinable
    mutating func subscribe(_ id: UInt64) {
        subscribers[id] = Subscriber(seen: version &- 1, waiter: nil)
    }

    @usableFromInline
    enum Poll {
        case value(State)
        case finished
        case wait
    }

    /// The state a consumer has not seen yet, the end of the stream, or that it must wait.
    @inlinable
    mutating func poll(_ id: UInt64) -> Poll {
        guard var subscriber = subscribers[id] else { return .finished }
        if subscriber.seen != version {
            subscriber.seen = version
            subscribers[id] = subscriber
            return .value(machine.state)
        }
        if phase == .stopped {
            subscribers[id] = nil
            return .finished
        }
        return .wait
    }

    @inlinable
    mutating func unsubscribe(_ id: UInt64) -> CheckedContinuation<State?, Never>? {
        subscribers.removeValue(forKey: id)?.waiter
    }

    @inlinable
    mutating func collectSubscribers(into step: inout Step<State, Event, Effect>) {
        var waiters: [CheckedContinuation<State?, Never>] = []
        for (id, subscriber) in subscribers {
            guard let waiter = subscriber.waiter else { continue }
            waiters.append(waiter)
            subscribers[id] = Subscriber(seen: version, waiter: nil)
        }
        guard !waiters.isEmpty else { return }
        let wakeups = step.wakeups ?? Wakeups()
        wakeups.subscribers = waiters
        wakeups.state = machine.state
        step.wakeups = wakeups
    }

    /// Ends every consumer's wait at the stop.
    @inlinable
    mutating func finishSubscribers() -> [CheckedContinuation<State?, Never>] {
        var waiters: [CheckedContinuation<State?, Never>] = []
        for (id, subscriber) in subscribers {
            if let waiter = subscriber.waiter {
                waiters.append(waiter)
                subscribers[id]?.waiter = nil
            }
        }
        return waiters
    }
}
