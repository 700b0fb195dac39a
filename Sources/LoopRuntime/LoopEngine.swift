internal import EffectHandlers
internal import LoopCore

/// Where a loop is in its life.
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
enum Origin {
    case outside
    case inside
}

/// One processed event: what the loop reports and does once the lock is released.
struct Step<State, Event, Effect> {
    var event: Event
    var effects: [Effect]
    var duration: Duration
    var inboxDepth: Int
    /// State-stream consumers waiting for the next state, and the state to give them.
    var subscribers: [CheckedContinuation<State?, Never>] = []
    var state: State?
    /// An async sender whose event took the room this step freed.
    var admittedSender: CheckedContinuation<Delivery, Never>?
}

/// An asynchronous effect waiting for its turn behind another with the same key.
struct QueuedEffect<Effect: Sendable, Event: Sendable>: Sendable {
    var id: UInt64
    var effect: Effect
    var lifecycle: EffectLifecycle
    var perform: @Sendable (Send<Event>) async throws -> Void
}

/// How an asynchronous effect is let in.
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
enum EffectOutcome {
    case completed
    case failed(any Error)
    case cancelled
    case timedOut(Duration)
}

/// The loop's whole mutable state, kept behind one lock: a value-type state machine whose methods
/// decide, and return what the caller must do after releasing the lock.
struct LoopEngine<State: Sendable, Event: Sendable, Effect: Sendable> {
    /// Bookkeeping for an effect that can be cancelled on its own (it has a key or a timeout).
    struct Controlled {
        var key: EffectKey?
        var cancel: (@Sendable () -> Void)?
        var cancelRequested = false
        var timedOut: Duration?
    }

    struct Subscriber {
        var seen: UInt64
        var waiter: CheckedContinuation<State?, Never>?
    }

    var machine: Machine<State, Event, Effect>
    let policy: InboxPolicy
    let timed: Bool
    var phase = Phase.idle
    var inbox = Inbox<Event>()
    var draining = false
    var report = LoopReport()
    var host: Host?
    var leftHost = false

    var nextID: UInt64 = 0
    var inFlight = 0
    var controlled: [UInt64: Controlled] = [:]
    var activeByKey: [EffectKey: [UInt64]] = [:]
    var queuedByKey: [EffectKey: Inbox<QueuedEffect<Effect, Event>>] = [:]
    var queuedCount = 0

    var waitingSenders: [(id: UInt64, event: Event, continuation: CheckedContinuation<Delivery, Never>)] = []
    var subscribers: [UInt64: Subscriber] = [:]
    var version: UInt64 = 0

    init(machine: Machine<State, Event, Effect>, policy: InboxPolicy, timed: Bool) {
        self.machine = machine
        self.policy = policy
        self.timed = timed
    }

    // MARK: Events

    enum Reception {
        case rejected(Rejection)
        case queued
        case droppedOldest(Event)
        case process(Step<State, Event, Effect>)
    }

    /// Takes `event` into the inbox, or, when nothing else is being processed, processes it at once.
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
            return .process(process(event))
        }
        inbox.append(event)
        return .queued
    }

    /// Why an event from `origin` is turned away now, if it is.
    func rejection(from origin: Origin) -> Rejection? {
        switch phase {
        case .idle, .running: nil
        case .stopping: origin == .outside ? .stopping : nil
        case .cancelling: .stopping
        case .stopped: .stopped
        }
    }

    /// For an async sender of `event` to a full suspending inbox: whether it must wait.
    mutating func mustWait(for event: Event) -> Bool {
        guard let capacity = policy.capacity, policy.overflow == .suspendSender else { return false }
        return rejection(from: .outside) == nil && inbox.count >= capacity
    }

    mutating func enqueueWaitingSender(
        _ id: UInt64,
        _ event: Event,
        _ continuation: CheckedContinuation<Delivery, Never>
    ) {
        waitingSenders.append((id, event, continuation))
    }

    /// Removes a waiting sender that gave up; its continuation, if it was still waiting.
    mutating func removeWaitingSender(_ id: UInt64) -> CheckedContinuation<Delivery, Never>? {
        guard let index = waitingSenders.firstIndex(where: { $0.id == id }) else { return nil }
        report.eventsSent += 1
        report.eventsRejected += 1
        return waitingSenders.remove(at: index).continuation
    }

    /// The next queued event, processed; or `nil`, ending this drain, when the inbox is empty.
    mutating func nextStep() -> Step<State, Event, Effect>? {
        guard phase == .running || phase == .stopping, let event = inbox.popFirst() else {
            draining = false
            return nil
        }
        var step = process(event)
        if !waitingSenders.isEmpty, rejection(from: .outside) == nil {
            let waiting = waitingSenders.removeFirst()
            report.eventsSent += 1
            inbox.append(waiting.event)
            step.admittedSender = waiting.continuation
        }
        return step
    }

    private mutating func process(_ event: Event) -> Step<State, Event, Effect> {
        let start = timed ? ContinuousClock.now : nil
        let effects = machine.process(event)
        let duration = start.map { ContinuousClock.now - $0 } ?? .zero
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
    var isQuiescent: Bool {
        (phase == .stopping || phase == .cancelling) && inbox.isEmpty && !draining && inFlight == 0
            && queuedCount == 0
    }

    /// The host to leave, once, when shutdown has nothing left to wait for.
    mutating func hostToLeave() -> Host? {
        guard isQuiescent, !leftHost, let host else { return nil }
        leftHost = true
        return host
    }

    /// Turns away every async sender still waiting for room.
    mutating func rejectWaitingSenders() -> [CheckedContinuation<Delivery, Never>] {
        let waiting = waitingSenders
        waitingSenders = []
        report.eventsSent += waiting.count
        report.eventsRejected += waiting.count
        return waiting.map(\.continuation)
    }

    /// Drops every queued event (an immediate stop), returning them for the observer.
    mutating func dropQueuedEvents() -> [Event] {
        let dropped = inbox.removeAll()
        report.eventsDropped += dropped.count
        return dropped
    }

    // MARK: Effects

    /// Counts a synchronous effect as started.
    mutating func startSync() {
        report.effectsStarted += 1
    }

    /// Lets an asynchronous effect in according to its lifecycle.
    mutating func admit(
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @escaping @Sendable (Send<Event>) async throws -> Void
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

    private mutating func begin(_ id: UInt64, _ lifecycle: EffectLifecycle) {
        inFlight += 1
        report.effectsStarted += 1
        if lifecycle.key != nil || lifecycle.timeout != nil {
            controlled[id] = Controlled(key: lifecycle.key)
        }
        if let key = lifecycle.key { activeByKey[key, default: []].append(id) }
    }

    /// Cancels every effect with `key`: returns the cancel handles of those running and the queued
    /// ones, which never start.
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
    mutating func cancelEverything() -> [Effect] {
        var cancelled: [Effect] = []
        for key in Array(queuedByKey.keys) {
            cancelled += cancel(key).1
        }
        return cancelled
    }

    /// Records the task's cancel handle; `false` when cancellation was already asked for, in which case
    /// the caller cancels at once.
    mutating func attach(_ id: UInt64, cancel: @escaping @Sendable () -> Void) -> Bool {
        guard var entry = controlled[id] else { return true }
        entry.cancel = cancel
        controlled[id] = entry
        return !entry.cancelRequested
    }

    /// Marks an effect as timed out; its cancel handle, if it is still running and not yet cancelled.
    mutating func timeOut(_ id: UInt64, after timeout: Duration) -> (@Sendable () -> Void)? {
        guard var entry = controlled[id], !entry.cancelRequested, entry.timedOut == nil else { return nil }
        entry.timedOut = timeout
        controlled[id] = entry
        return entry.cancel
    }

    /// Whether the effect `id` should not start at all (it was cancelled while waiting to start).
    func isCancelled(_ id: UInt64) -> Bool {
        controlled[id]?.cancelRequested ?? false
    }

    /// How an effect's run ends once the loop's own decisions are counted: a timeout or a cancellation
    /// the loop asked for outweighs what the handler did.
    func resolve(_ id: UInt64, _ result: EffectOutcome) -> EffectOutcome {
        if let timeout = controlled[id]?.timedOut { return .timedOut(timeout) }
        if controlled[id]?.cancelRequested == true { return .cancelled }
        return result
    }

    /// Records how an asynchronous effect ended (as resolved); returns the next queued effect with its key, now
    /// started, if any.
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

    mutating func subscribe(_ id: UInt64) {
        subscribers[id] = Subscriber(seen: version &- 1, waiter: nil)
    }

    enum Poll {
        case value(State)
        case finished
        case wait
    }

    /// The state a consumer has not seen yet, the end of the stream, or that it must wait.
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

    mutating func unsubscribe(_ id: UInt64) -> CheckedContinuation<State?, Never>? {
        subscribers.removeValue(forKey: id)?.waiter
    }

    private mutating func collectSubscribers(into step: inout Step<State, Event, Effect>) {
        for (id, subscriber) in subscribers {
            guard let waiter = subscriber.waiter else { continue }
            step.subscribers.append(waiter)
            subscribers[id] = Subscriber(seen: version, waiter: nil)
        }
        if !step.subscribers.isEmpty { step.state = machine.state }
    }

    /// Ends every consumer's wait at the stop.
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
