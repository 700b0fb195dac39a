public import EffectHandlers
public import LoopCore

/// A loop's state machine: the only place where the loop changes. One value, kept behind the loop's
/// lock; every input is a method that decides and returns an action value, which the driver (``Loop``)
/// carries out once the lock is released.
///
/// Where the loop is in its life is one enum, ``Phase``, so an impossible combination (stopping
/// without a host, draining after the stop) cannot be written down. The inbox, the state machine of the
/// program, the effect table and the state-stream consumers are the data every phase shares.
@usableFromInline
struct LoopEngine<State: Sendable, Event: Sendable, Effect: Sendable> {
    /// Where a loop is in its life.
    @usableFromInline
    enum Phase {
        /// Created, not yet running: events from outside are queued, nothing is processed.
        case created
        /// Running on `host`. `draining` is the baton: whoever holds it processes events, everyone else
        /// queues them. A started loop has no host until it needs one (its first asynchronous effect, or a
        /// stop that must wait).
        case running(Host?, draining: Bool)
        /// Graceful shutdown on `host`: events from outside are turned away; queued events and the
        /// results of effects are still processed. No host only if nothing asynchronous is left.
        case stopping(Host?, draining: Bool)
        /// Stopped, for the reason given: nothing is taken or processed again.
        case stopped(LoopReport.Ending)
    }

    /// How the engine took an event.
    @usableFromInline
    enum Reception {
        /// Turned away, for the reason given.
        case rejected(Rejection)
        /// Queued; whoever drains will process it.
        case queued
        /// Queued, and the oldest queued event was dropped to make room.
        case droppedOldest(Event)
        /// Processed at once by the caller, who now holds the drain baton: take the step, then
        /// continue with ``LoopEngine/nextStep(counting:)``.
        case step(Step<State, Event, Effect>)
        /// Processed completely inside the lock: no effects, no observer, nobody to wake.
        case processed
    }

    /// What the drainer does next.
    @usableFromInline
    enum Drain {
        /// Take this step, then ask again.
        case step(Step<State, Event, Effect>)
        /// Events were processed completely; release the lock and ask again.
        case again
        /// The inbox is empty: the drain has ended.
        case idle
        /// The drain has ended; wake these tasks waiting for the loop to be idle.
        case idleWaking([CheckedContinuation<Void, Never>])
        /// The drain has ended and so has the loop's graceful shutdown.
        case finished(Finish<State, Event, Effect>)
    }

    /// What claiming the loop for a host did.
    @usableFromInline
    enum Claim {
        /// The loop runs on the host. The claimer holds the drain baton: it starts the program's
        /// start-up effects, wakes `startWaiters`, then drains.
        case started(Dispatch<Effect, Event>, startWaiters: [CheckedContinuation<Bool, Never>])
        /// It cannot run.
        case refused(LoopError)
    }

    /// What a stop did.
    @usableFromInline
    enum Stop {
        /// Nothing: the loop has stopped.
        case none
        /// The loop was already stopping on `host`: a shorter grace period may still shorten it.
        case alreadyStopping(Host?)
        /// The loop stops on `host`: turn `senders` away, call `cancelling` (effects waiting for their
        /// delay never start), report `cancelled` (throttled effects that waited), carry out `finish` if
        /// nothing was left to wait for.
        case stopping(
            Host?,
            senders: [TurnedAway<Event>],
            cancelling: [CancelHandle] = [],
            cancelled: [IdentifiedEffect<Effect>] = [],
            finish: Finish<State, Event, Effect>?
        )
        /// The loop had never run: it stopped for good.
        case finished(Finish<State, Event, Effect>)
    }

    /// What an effect's end did.
    @usableFromInline
    struct EffectEnd {
        /// The effect's id.
        @usableFromInline
        var id: UInt64
        /// The effect.
        @usableFromInline
        var effect: Effect
        /// How it ended, once the loop's own decisions (a cancel, a timeout) are counted.
        @usableFromInline
        var outcome: EffectOutcome
        /// The event the router makes of a failure or timeout. Until the driver delivers it with
        /// ``receiveMapped(_:_:)``, the loop does not finish its shutdown.
        @usableFromInline
        var mapped: Event?
        /// The effect queued behind it that starts now.
        @usableFromInline
        var next: Dispatch<Effect, Event>?
        /// The loop's shutdown, if this was the last thing it waited for.
        @usableFromInline
        var finish: Finish<State, Event, Effect>?

        @inlinable
        init(
            id: UInt64,
            effect: Effect,
            outcome: EffectOutcome,
            mapped: Event?,
            next: Dispatch<Effect, Event>?,
            finish: Finish<State, Event, Effect>?
        ) {
            self.id = id
            self.effect = effect
            self.outcome = outcome
            self.mapped = mapped
            self.next = next
            self.finish = finish
        }
    }

    @usableFromInline
    typealias WaitingSender = EngineWaiting<State, Event, Effect>.Sender

    @usableFromInline
    var machine: Machine<State, Event, Effect>
    /// The loop's context, which every loop of a group shares: the engine reads its router, inbox
    /// policy and flags there, one reference where a copy of them was 136 bytes of each loop (w3's bytes
    /// per loop, `Docs/Performance.md`).
    @usableFromInline
    let settings: LoopContext<State, Event, Effect>
    @usableFromInline
    var phase = Phase.created
    @usableFromInline
    var inbox = Queue<Envelope<Event>>()
    @usableFromInline
    var counts = LoopCounts()
    @usableFromInline
    var effects: EffectTable<Effect, Event>
    /// The lists below, in one object allocated on first use.
    @usableFromInline
    var waiting = EngineWaiting<State, Event, Effect>()

    /// Tasks following the loop's states (``Loop/states``).
    @inlinable
    var subscribers: StateSubscribers<State> {
        get { waiting.lists?.subscribers ?? StateSubscribers() }
        _modify { yield &waiting.unique().subscribers }
    }

    /// Senders waiting for room in a full inbox.
    @inlinable
    var waitingSenders: [WaitingSender] {
        get { waiting.lists?.senders ?? [] }
        set { if !(newValue.isEmpty && waiting.lists == nil) { waiting.unique().senders = newValue } }
        _modify { yield &waiting.unique().senders }
    }

    /// Tasks waiting for the loop to start (or, `untilStop`, to stop).
    @inlinable
    var startWaiters: [EngineWaiting<State, Event, Effect>.StartWaiter] {
        get { waiting.lists?.startWaiters ?? [] }
        set { if !(newValue.isEmpty && waiting.lists == nil) { waiting.unique().startWaiters = newValue } }
        _modify { yield &waiting.unique().startWaiters }
    }

    /// Tasks waiting for the drain to end (test harnesses).
    @inlinable
    var idleWaiters: [CheckedContinuation<Void, Never>] {
        get { waiting.lists?.idleWaiters ?? [] }
        set { if !(newValue.isEmpty && waiting.lists == nil) { waiting.unique().idleWaiters = newValue } }
        _modify { yield &waiting.unique().idleWaiters }
    }

    /// Events the router made of failed or timed-out effects, not delivered yet.
    @inlinable
    var pendingMapped: Int {
        get { waiting.lists?.pendingMapped ?? 0 }
        set { if newValue != pendingMapped { waiting.unique().pendingMapped = newValue } }
    }

    /// Requests sent to this loop, failed when it stops if they have no reply by then. Those resolved are
    /// swept out when the array is full, so it stays within twice the number waiting.
    @inlinable
    var requests: [any PendingRequest] {
        get { waiting.lists?.requests ?? [] }
        set { if !(newValue.isEmpty && waiting.lists == nil) { waiting.unique().requests = newValue } }
        _modify { yield &waiting.unique().requests }
    }

    @inlinable
    init(
        machine: Machine<State, Event, Effect>,
        settings: LoopContext<State, Event, Effect>,
        first effects: [Effect] = []
    ) {
        self.machine = machine
        self.settings = settings
        self.effects = EffectTable(tracksAll: settings.tracksEffects)
        if !effects.isEmpty { waiting.unique().firstEffects = effects }
    }

    /// An engine with a context of its own, for tests.
    init(
        machine: Machine<State, Event, Effect>,
        router: EffectRouter<Effect, Event>,
        policy: InboxPolicy,
        timed: Bool,
        tracksEffects: Bool? = nil
    ) {
        self.init(
            machine: machine,
            settings: LoopContext(
                router: router,
                policy: policy,
                timed: timed,
                tracksEffects: tracksEffects ?? timed
            )
        )
    }

    /// How effects are performed: the engine decides asynchronous ones in the same hold of the lock as
    /// the update.
    @inlinable
    var router: EffectRouter<Effect, Event> {
        _read { yield settings.router }
    }

    /// The inbox's capacity and what happens beyond it.
    @inlinable
    var policy: InboxPolicy { settings.inbox }

    /// Whether to time each update (an observer, or a scope told of each event, needs the duration).
    @inlinable
    var timed: Bool { settings.timed }

    // MARK: Queries

    /// Whether `run()` is under way: from the claim until the loop stopped.
    @inlinable
    var isRunning: Bool {
        switch phase {
        case .running, .stopping: true
        case .created, .stopped: false
        }
    }

    /// Whether someone holds the drain baton.
    @inlinable
    var isDraining: Bool {
        switch phase {
        case .running(_, let draining), .stopping(_, let draining): draining
        case .created, .stopped: false
        }
    }

    /// The host the loop runs on, while it runs.
    @inlinable
    var host: Host? {
        switch phase {
        case .running(let host, _), .stopping(let host, _): host
        case .created, .stopped: nil
        }
    }

    /// Whether the loop has stopped.
    @inlinable
    var isStopped: Bool {
        if case .stopped = phase { true } else { false }
    }

    /// The state after the last processed event.
    @inlinable
    var state: State { machine.state }

    /// Whether no event is being processed or waiting.
    @inlinable
    var hasNoEventUnderWay: Bool { !isDraining && inbox.isEmpty }

    /// Whether the loop has settled: it does not run, or no event is queued or being processed and no
    /// effect is under way.
    @inlinable
    var isSettled: Bool {
        !isRunning || (hasNoEventUnderWay && effects.isEmpty && pendingMapped == 0)
    }

    /// How many asynchronous effects are let in, not asked to cancel, and not ended.
    @inlinable
    var liveEffects: Int { effects.running.values.count { !$0.cancelAsked } }

    /// How many tasks wait for the loop to start or to stop.
    @inlinable
    var phaseWaiterCount: Int { startWaiters.count }

    /// How many throttle intervals are under way.
    @inlinable
    var throttleIntervals: Int { effects.windows.count }

    /// What the loop has done so far.
    @inlinable
    var report: LoopReport { counts.report }

    /// What the loop has done so far, with the senders waiting for room now.
    @inlinable
    var currentReport: LoopReport {
        var report = counts.report
        report.sendersWaiting = waitingSenders.count
        return report
    }

    // MARK: State subscribers

    /// A consumer of the loop's states starts following them.
    @inlinable
    mutating func subscribe(_ id: UInt64) {
        subscribers.subscribe(id)
    }

    /// What consumer `id` gets without waiting: a state it has not seen, the end of the states, or
    /// nothing yet (`nil`).
    @inlinable
    mutating func pollState(for id: UInt64) -> StatePoll<State>? {
        switch subscribers.poll(id, ended: isStopped) {
        case .changed: .state(machine.state)
        case .finished: .finished
        case .wait: nil
        }
    }

    /// Consumer `id` waits for the next state.
    @inlinable
    mutating func parkSubscriber(_ id: UInt64, _ waiter: CheckedContinuation<State?, Never>) {
        subscribers.park(id, waiter)
    }

    /// Consumer `id` stops following the states: its waiter, if it was waiting (resume it with `nil`).
    @inlinable
    mutating func unsubscribe(_ id: UInt64) -> CheckedContinuation<State?, Never>? {
        subscribers.unsubscribe(id)
    }

    /// The host the loop runs on, made by `make` if it has none yet; `nil` if it does not run.
    @inlinable
    mutating func adoptHost(_ make: () -> Host) -> Host? {
        switch phase {
        case .running(let host?, _), .stopping(let host?, _):
            return host
        case .running(nil, let draining):
            let host = make()
            phase = .running(host, draining: draining)
            return host
        case .stopping(nil, let draining):
            let host = make()
            phase = .stopping(host, draining: draining)
            return host
        case .created, .stopped:
            return nil
        }
    }

    /// Registers a task waiting for the loop to stop; `false` if it has stopped already. Kept with the
    /// start waiters (`untilStop`): a list fewer in ``EngineWaiting``.
    @inlinable
    mutating func waitForStop(_ id: UInt64, _ waiter: CheckedContinuation<Bool, Never>) -> Bool {
        if case .stopped = phase { return false }
        startWaiters.append((id, waiter, true))
        return true
    }

    /// Removes the stop waiter `id` (its task was cancelled), for the caller to resume.
    @inlinable
    mutating func removeStopWaiter(_ id: UInt64) -> CheckedContinuation<Bool, Never>? {
        removeStartWaiter(id)
    }

    @inlinable
    mutating func setDraining(_ draining: Bool) {
        switch phase {
        case .running(let host, _): phase = .running(host, draining: draining)
        case .stopping(let host, _): phase = .stopping(host, draining: draining)
        case .created, .stopped: break
        }
    }

    /// Gives back the inbox's buffers if it is empty: for a loop that has just started, whose first
    /// events were queued while it was created and which may now idle for long.
    @inlinable
    mutating func releaseInboxIfEmpty() {
        inbox.releaseBuffersIfEmpty()
    }

    // MARK: Claim

    /// Claims the loop for running on `host`, decides the program's start-up effects (those the engine
    /// was created with), and hands the caller the drain baton, so no event is processed before they
    /// start.
    @inlinable
    mutating func claim(_ host: Host?) -> Claim {
        var first: [Effect] = []
        let waits = waiting.lists.map { !$0.firstEffects.isEmpty } ?? false
        if waits, case .created = phase { swap(&first, &waiting.unique().firstEffects) }
        let claim = claim(host, first: first)
        // Once the start-up effects and the start waiters are taken, the lists may hold nothing.
        waiting.releaseIfEmpty()
        return claim
    }

    /// Claims the loop as ``claim(_:)`` does, with `effects` as the start-up effects.
    @inlinable
    mutating func claim(_ host: Host?, first effects: [Effect]) -> Claim {
        switch phase {
        case .created:
            phase = .running(host, draining: true)
            let waiters = startWaiters.filter { !$0.untilStop }.map { $0.waiter }
            if !waiters.isEmpty { startWaiters.removeAll { !$0.untilStop } }
            let dispatch =
                effects.isEmpty ? Dispatch() : decide(effects, firstID: self.effects.reserveIDs(effects.count))
            return .started(dispatch, startWaiters: waiters)
        case .running, .stopping:
            return .refused(.alreadyRunning)
        case .stopped:
            return .refused(.alreadyStopped)
        }
    }

    /// Registers a task waiting for the loop to start. `true` when it has started already (it is
    /// running or ran), `false` when it stopped without running; `nil` when the waiter was parked.
    @inlinable
    mutating func waitForStart(_ id: UInt64, _ waiter: CheckedContinuation<Bool, Never>) -> Bool? {
        switch phase {
        case .created:
            startWaiters.append((id, waiter, false))
            return nil
        case .running, .stopping: return true
        case .stopped(let ending): return ending != .neverStarted
        }
    }

    /// Removes a start waiter that gave up; its continuation, if it was still waiting.
    @inlinable
    mutating func removeStartWaiter(_ id: UInt64) -> CheckedContinuation<Bool, Never>? {
        guard let index = startWaiters.firstIndex(where: { $0.id == id }) else { return nil }
        return startWaiters.remove(at: index).waiter
    }

    // MARK: Events

    /// Takes `event` from `origin`: rejects it, queues it, or, when nobody is draining, processes it at
    /// once.
    @inlinable
    mutating func receive(
        _ event: Event,
        from origin: EventOrigin,
        context: CarriedContext? = nil
    ) -> Reception {
        counts.eventsSent += 1
        let busy: Bool
        switch phase {
        case .created:
            busy = true
        case .running(_, let draining):
            busy = draining
        case .stopping(_, let draining):
            guard origin == .effect else {
                counts.eventsRejected += 1
                return .rejected(.stopping)
            }
            busy = draining
        case .stopped:
            counts.eventsRejected += 1
            return .rejected(.stopped)
        }
        if let capacity = policy.capacity, inbox.count >= capacity {
            switch policy.overflow {
            case .rejectNewest, .suspendSender:
                counts.eventsRejected += 1
                return .rejected(.inboxFull)
            case .dropOldest:
                let oldest = inbox.popFirst()
                inbox.append(Envelope(event, from: origin, context: context))
                guard let oldest else { return .queued }
                counts.eventsDropped += 1
                return .droppedOldest(oldest.event)
            }
        }
        guard !busy && inbox.isEmpty else {
            inbox.append(Envelope(event, from: origin, context: context))
            return .queued
        }
        let envelope = Envelope(event, from: origin, context: context)
        guard let step = process(envelope) else {
            if case .running = phase { return .processed }
            // Stopping: the caller takes the baton even so, and its drain ends the stop.
            setDraining(true)
            return .step(completeStep(of: envelope))
        }
        setDraining(true)
        return .step(consume step)
    }

    /// Takes `event` sent by the handler of effect `id`; turned away if that effect has already ended
    /// (it timed out, or was abandoned at the stop), so a late handler cannot change the state.
    @inlinable
    mutating func receive(
        _ event: Event,
        fromEffect id: UInt64,
        context: CarriedContext? = nil
    ) -> Reception {
        guard effects.isLive(id) else {
            counts.eventsSent += 1
            counts.eventsRejected += 1
            return .rejected(isStopped ? .stopped : .effectEnded)
        }
        return receive(event, from: .effect, context: context)
    }

    /// Delivers the event the router made of a failed or timed-out effect (see ``EffectEnd/mapped``).
    @inlinable
    mutating func receiveMapped(
        _ event: Event,
    ) -> (Reception, Finish<State, Event, Effect>?) {
        pendingMapped -= 1
        let reception = receive(event, from: .effect)
        if case .step = reception { return (reception, nil) }
        return (reception, finishIfDrained())
    }

    /// How many events that leave nothing to do outside the lock are processed in one hold of it, so a
    /// concurrent sender never waits behind a long batch.
    @usableFromInline
    static var batchLimit: Int { 64 }

    /// For the baton holder: processes queued events, those that leave nothing to do outside the lock in
    /// a batch, stopping at the first that does (returned as a step), at the batch limit, or when the
    /// inbox is empty, which ends the drain (and the shutdown, if nothing else is left).
    @inlinable
    mutating func nextStep(counting tally: SyncTally = SyncTally()) -> Drain {
        count(tally)
        var processed = 0
        while isRunning, let envelope = inbox.popFirst() {
            var step = process(envelope)
            if !waitingSenders.isEmpty, case .running = phase {
                var admitting = step ?? completeStep(of: envelope)
                let waiting = waitingSenders.removeFirst()
                counts.eventsSent += 1
                inbox.append(Envelope(waiting.event, from: waiting.origin, context: waiting.context))
                let wakeups = admitting.wakeups ?? Wakeups()
                wakeups.admittedSender = waiting.continuation
                admitting.wakeups = wakeups
                step = admitting
            }
            if let step = step.take() { return .step(consume step) }
            processed += 1
            if processed == Self.batchLimit { return .again }
        }
        setDraining(false)
        if let finish = finishIfDrained() { return .finished(finish) }
        if !idleWaiters.isEmpty { return .idleWaking(takeIdleWaiters()) }
        return .idle
    }

    /// Counts the synchronous effects that ended outside the lock: started, and completed or failed.
    @inlinable
    mutating func count(_ tally: SyncTally) {
        guard !tally.isEmpty else { return }
        counts.effectsStarted += tally.completed + tally.failed
        counts.effectsCompleted += tally.completed
        counts.effectsFailed += tally.failed
    }

    /// Applies one event and decides its effects; the step to take outside the lock, or `nil` when the
    /// event left nothing to do there (no effects, no duration to report, nobody to wake): most events
    /// of most loops, for which no step is built and destroyed.
    @inlinable
    mutating func process(
        _ envelope: Envelope<Event>,
    ) -> Step<State, Event, Effect>? {
        let produced: [Effect]
        var duration: Duration?
        if timed {
            let start = ContinuousClock.now
            produced = machine.process(envelope.event)
            duration = ContinuousClock.now - start
        } else {
            produced = machine.process(envelope.event)
        }
        counts.eventsProcessed += 1
        var dispatch = Dispatch<Effect, Event>()
        if !produced.isEmpty {
            let first = effects.reserveIDs(produced.count)
            dispatch =
                router.hasAsyncRoutes
                ? decide(produced, firstID: first, context: envelope.context)
                : Dispatch(effects: produced, firstID: first)
        }
        // Nobody follows the states of most loops: then there is no version to move (a subscriber who comes
        // later sees the state it finds as new, whatever the version).
        var wakeups: Wakeups<State>?
        let followed = waiting.lists.map { !$0.subscribers.consumers.isEmpty } ?? false
        if followed {
            if subscribers.parked == 0 {
                subscribers.version &+= 1
            } else {
                let woken = Wakeups<State>()
                woken.subscribers = subscribers.changed()
                woken.state = machine.state
                wakeups = woken
            }
        }
        if dispatch.isEmpty && duration == nil && wakeups == nil { return nil }
        // Built where it is returned: built in a variable, it was copied on return.
        return Step(
            event: envelope.event,
            origin: envelope.origin,
            dispatch: dispatch,
            duration: duration,
            inboxDepth: inbox.count,
            wakeups: wakeups,
            context: envelope.context
        )
    }

    /// The step of an event that left nothing to do outside the lock, for the rare caller that must
    /// hand one over even so (a stop to end, a waiting sender to wake).
    @inlinable
    func completeStep(of envelope: Envelope<Event>) -> Step<State, Event, Effect> {
        Step(
            event: envelope.event,
            origin: envelope.origin,
            dispatch: Dispatch(),
            duration: nil,
            inboxDepth: inbox.count,
            context: envelope.context
        )
    }

    /// Decides, in order, what happens to each asynchronous effect of `effects` (whose ids follow
    /// `firstID`) and to each unrouted one that cancels a key; synchronous and other unrouted effects are
    /// left to the driver.
    @inlinable
    mutating func decide(
        _ effects: [Effect],
        firstID: UInt64,
        context: CarriedContext? = nil
    ) -> Dispatch<Effect, Event> {
        var decisions: [Decision<Effect, Event>] = []
        // Read from the context once, not through `router` per effect (a copy of the whole router each).
        let (routes, lifecycleOf, scope) = (settings.routes, settings.lifecycleOf, settings.scope)
        for index in effects.indices {
            let effect = effects[index]
            let performer = EffectRouter.performer(in: routes, for: effect)
            // A synchronous handler's effect runs inline: lifecycles schedule asynchronous effects.
            if case .sync? = performer { continue }
            let lifecycle = lifecycleOf(effect)
            if lifecycle.policy == .cancel, let key = lifecycle.key {
                let (cancelling, cancelled) = self.effects.cancel(key, report: &counts)
                decisions.append(Decision(index, .cancel(cancelling: cancelling, cancelled: cancelled)))
                continue
            }
            var perform: @Sendable (Effect, Send<Event>) async throws -> Void
            var start: (@Sendable (Effect, Send<Event>, @escaping EffectRouter<Effect, Event>.Completion) -> Void)?
            switch performer {
            case .async(let async)?:
                perform = async
            case .completing(let completing)?:
                // Uncontrolled, it starts inline; controlled, its task awaits the completion.
                start = completing
                perform = { effect, send in
                    let once = FirstCall()
                    try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
                        // Called once by contract; a second call is ignored, as on the inline path.
                        completing(effect, send) { result in if once.isFirst() { done.resume(with: result) } }
                    }
                }
            default:
                continue
            }
            // Inside the router's scope, the handler runs with the context carried from the send.
            if let scope {
                let inner = perform
                perform = { effect, send in try await scope.run(context, effect) { try await inner(effect, send) } }
                if let begin = start {
                    start = { effect, send, done in
                        do {
                            try scope.run(context, effect) { begin(effect, send, done) }
                        } catch {
                            done(.failure(error))
                        }
                    }
                }
            }
            let holding: Bool
            if case .running = self.phase { holding = true } else { holding = false }
            decisions.append(
                Decision(
                    index,
                    self.effects.admit(
                        firstID &+ UInt64(index),
                        effect,
                        lifecycle,
                        perform,
                        start: start,
                        holds: holding,
                        report: &counts
                    )
                )
            )
        }
        return Dispatch(effects: effects, firstID: firstID, decisions: decisions, host: decisions.isEmpty ? nil : host)
    }

    /// Parks a task until nobody processes events and none are queued; `false` if that is already so.
    @inlinable
    mutating func waitForIdle(_ waiter: CheckedContinuation<Void, Never>) -> Bool {
        guard isDraining || (!inbox.isEmpty && isRunning) else { return false }
        idleWaiters.append(waiter)
        return true
    }

    @inlinable
    mutating func takeIdleWaiters() -> [CheckedContinuation<Void, Never>] {
        defer { idleWaiters = [] }
        return idleWaiters
    }

    // MARK: Waiting senders

    /// For an async sender to a full inbox whose policy suspends senders: whether it must wait.
    @inlinable
    func mustWait() -> Bool {
        guard let capacity = policy.capacity, policy.overflow == .suspendSender else { return false }
        switch phase {
        case .created, .running: return inbox.count >= capacity
        case .stopping, .stopped: return false
        }
    }

    @inlinable
    mutating func park(_ sender: WaitingSender) {
        waitingSenders.append(sender)
    }

    /// Removes a waiting sender that gave up, counting its event rejected; its continuation, if it was
    /// still waiting.
    @inlinable
    mutating func removeWaitingSender(_ id: UInt64) -> CheckedContinuation<Delivery, Never>? {
        guard let index = waitingSenders.firstIndex(where: { $0.id == id }) else { return nil }
        counts.eventsSent += 1
        counts.eventsRejected += 1
        return waitingSenders.remove(at: index).continuation
    }

    /// Turns away every waiting sender, counting their events rejected.
    @inlinable
    mutating func takeWaitingSenders() -> [TurnedAway<Event>] {
        let waiting = waitingSenders
        waitingSenders = []
        counts.eventsSent += waiting.count
        counts.eventsRejected += waiting.count
        return waiting.map { TurnedAway(event: $0.event, sender: $0.continuation) }
    }

    // MARK: Requests

    /// Holds `request`, sent to this loop and taken, so the loop's stop can fail it; `false` if the loop
    /// has already stopped (then nothing will reply: the caller fails it).
    @inlinable
    mutating func register(_ request: any PendingRequest) -> Bool {
        if case .stopped = phase { return false }
        if requests.count == requests.capacity && requests.count >= 16 {
            requests.removeAll { $0.isResolved }
            if requests.count > requests.capacity / 2 { requests.reserveCapacity(requests.capacity * 2) }
        }
        requests.append(request)
        return true
    }

    // MARK: Stopping

    /// Graceful stop. A running loop stops taking events from outside and finishes once its queued
    /// events and its effects are done. A loop that never ran stops for good: the events queued for it
    /// are dropped (counted, and reported), since nothing will ever process them.
    /// A loop without a host that cannot finish at once gets one from `makeHost`, so its stop has a deadline.
    @inlinable
    mutating func stop(makeHost: () -> Host? = { nil }) -> Stop {
        switch phase {
        case .created:
            return .finished(finish(.neverStarted))
        case .running(let host, let draining):
            phase = .stopping(host, draining: draining)
            let senders = takeWaitingSenders()
            let (cancelling, cancelled) = effects.cancelWaiting(report: &counts)
            let finish = finishIfDrained()
            var stopping = host
            if finish == nil, host == nil, let made = makeHost() {
                stopping = made
                phase = .stopping(made, draining: draining)
            }
            return .stopping(
                stopping,
                senders: senders,
                cancelling: cancelling,
                cancelled: cancelled,
                finish: finish
            )
        case .stopping(let host, _):
            return .alreadyStopping(host)
        case .stopped:
            return .none
        }
    }

    /// Stops a running loop that has nothing under way (nothing queued or being processed, no effect
    /// let in) and whose state `quiet` accepts; `nil`, changing nothing, otherwise. In the same lock hold
    /// as the check, so no event slips in between: how a group passivates a quiet member.
    @inlinable
    mutating func stopIfQuiet(_ quiet: (State) -> Bool) -> Stop? {
        guard case .running(_, draining: false) = phase, inbox.isEmpty, effects.isEmpty, effects.windows.isEmpty,
            pendingMapped == 0, quiet(machine.state)
        else { return nil }
        return stop()
    }

    /// Stops at once, without waiting for anything: queued events are dropped, effects not yet begun are
    /// cancelled, running ones are cancelled and abandoned. For the end of the grace period
    /// (`.deadlineExceeded`) and the cancellation of the task running the loop (`.cancelled`). `nil` if
    /// the loop had already stopped.
    @inlinable
    mutating func abandon(_ ending: LoopReport.Ending) -> Finish<State, Event, Effect>? {
        if case .stopped = phase { return nil }
        return finish(ending)
    }

    /// The loop's graceful shutdown, if nothing is left to do.
    @inlinable
    mutating func finishIfDrained() -> Finish<State, Event, Effect>? {
        guard case .stopping(_, draining: false) = phase, inbox.isEmpty, effects.isEmpty, pendingMapped == 0
        else { return nil }
        return finish(.drained)
    }

    /// Moves to `.stopped(ending)` and collects everything to release.
    @inlinable
    mutating func finish(_ ending: LoopReport.Ending) -> Finish<State, Event, Effect> {
        var finish = Finish<State, Event, Effect>(ending: ending, host: host)
        phase = .stopped(ending)
        counts.ending = ending
        finish.dropped = inbox.removeAll().map { $0.event }
        counts.eventsDropped += finish.dropped.count
        (finish.abandoned, finish.cancelling, finish.cancelled) = effects.abandonAll(report: &counts)
        finish.senders = takeWaitingSenders()
        finish.subscribers = waiting.lists == nil ? [] : subscribers.end()
        finish.idleWaiters = takeIdleWaiters()
        finish.startWaiters = startWaiters.map { $0.waiter }
        startWaiters = []
        finish.requests = requests
        requests = []
        pendingMapped = 0
        return finish
    }

    // MARK: Effects

    /// The task of controlled effect `id` begins; `false` when the handler must not run (the effect was
    /// cancelled before it began, or the loop stopped).
    @inlinable
    mutating func begin(_ id: UInt64, cancel: CancelHandle) -> Bool {
        effects.begin(id, cancel: cancel, report: &counts)
    }

    /// A delayed effect's task starts waiting for its delay; `cancel` ends the wait. `false` when it must
    /// not run: it was cancelled, or the loop is stopping (a graceful stop starts nothing that waits for
    /// time, even an effect asked for after the stop began) or stopped.
    @inlinable
    mutating func arm(_ id: UInt64, cancel: CancelHandle) -> Bool {
        guard case .running = phase else { return false }
        return effects.arm(id, cancel: cancel)
    }

    /// The throttle interval of `key` ended: the effect that waited for it starts now (with the next
    /// interval); `nil` if none waited or the loop has stopped.
    @inlinable
    mutating func intervalEnded(_ key: EffectKey) -> Dispatch<Effect, Event>? {
        guard !isStopped, let (admitted, interval) = effects.intervalEnded(key, report: &counts) else { return nil }
        return Dispatch(
            effects: [admitted.effect],
            firstID: admitted.id,
            decisions: [Decision(0, .throttled(admitted, interval: interval))],
            host: host
        )
    }

    /// Effect `admitted`'s handler returned with `result`. `nil` when its end no longer counts (it had
    /// timed out, or the loop stopped without waiting for it).
    @inlinable
    mutating func end(_ admitted: Admitted<Effect, Event>, _ result: EffectOutcome) -> EffectEnd? {
        guard !isStopped, let ended = effects.end(admitted, result, report: &counts) else { return nil }
        return action(after: ended)
    }

    /// Effect `id` ran past `timeout`: it ends now, reported timed out (cancelled, if the loop had asked
    /// it to cancel). Returns its end and the handle to cancel its handler, whose later return is
    /// ignored.
    @inlinable
    mutating func timeOut(
        _ id: UInt64,
        after timeout: Duration,
        handlerRunning: Bool
    ) -> (EffectEnd, CancelHandle?)? {
        guard !isStopped else { return nil }
        let timing = effects.timeOut(id, after: timeout, handlerRunning: handlerRunning, report: &counts)
        guard let (ended, cancel) = timing else { return nil }
        return (action(after: ended), cancel)
    }

    /// The handler of effect `id`, reported timed out while it ran on, has returned: it no longer runs
    /// unaccounted.
    @inlinable
    mutating func stragglerReturned(_ id: UInt64) {
        effects.stragglers.remove(id)
    }

    /// What the driver does after effect `ended` ended: its error event, the effect queued behind it,
    /// and the end of the loop's stop if it was the last thing the stop waited for.
    @inlinable
    mutating func action(after ended: EffectTable<Effect, Event>.Ended) -> EffectEnd {
        var mapped: Event?
        switch ended.outcome {
        case .failed(let error): mapped = router.event(for: error, of: ended.effect)
        case .timedOut(let timeout): mapped = router.event(for: EffectError.timedOut(after: timeout), of: ended.effect)
        case .completed, .cancelled: break
        }
        if mapped != nil { pendingMapped += 1 }
        let next = ended.next.map {
            Dispatch(
                effects: [$0.effect],
                firstID: $0.id,
                decisions: [Decision(0, .start($0, cancelling: [], cancelled: []))],
                host: host
            )
        }
        return EffectEnd(
            id: ended.id,
            effect: ended.effect,
            outcome: ended.outcome,
            mapped: mapped,
            next: next,
            finish: mapped == nil ? finishIfDrained() : nil
        )
    }
}

// The engine's actions compare as values, so its tests are one `#expect` per transition. Closures
// (cancel handles, performers) compare by the effect id they belong to; waiting continuations by count.

extension LoopEngine.Phase: Equatable {
    @inlinable
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.created, .created): true
        case (.running(let left, let leftDraining), .running(let right, let rightDraining)),
            (.stopping(let left, let leftDraining), .stopping(let right, let rightDraining)):
            left === right && leftDraining == rightDraining
        case (.stopped(let left), .stopped(let right)): left == right
        default: false
        }
    }
}

extension LoopEngine.Reception: Equatable where Event: Equatable, Effect: Equatable {}
extension LoopEngine.Drain: Equatable where Event: Equatable, Effect: Equatable {
    @inlinable
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.step(let left), .step(let right)): left == right
        case (.again, .again), (.idle, .idle): true
        case (.idleWaking(let left), .idleWaking(let right)): left.count == right.count
        case (.finished(let left), .finished(let right)): left == right
        default: false
        }
    }
}

extension LoopEngine.Claim: Equatable where Event: Equatable, Effect: Equatable {
    @inlinable
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.started(let left, let leftWaiters), .started(let right, let rightWaiters)):
            left == right && leftWaiters.count == rightWaiters.count
        case (.refused(let left), .refused(let right)): left == right
        default: false
        }
    }
}

extension LoopEngine.Stop: Equatable where Event: Equatable, Effect: Equatable {
    @inlinable
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.none, .none): true
        case (.alreadyStopping(let left), .alreadyStopping(let right)): left === right
        case (
            .stopping(let left, let leftSenders, let leftCancelling, let leftCancelled, let leftFinish),
            .stopping(let right, let rightSenders, let rightCancelling, let rightCancelled, let rightFinish)
        ):
            left === right && leftSenders.count == rightSenders.count && leftCancelling == rightCancelling
                && leftCancelled == rightCancelled && leftFinish == rightFinish
        case (.finished(let left), .finished(let right)): left == right
        default: false
        }
    }
}

extension LoopEngine.EffectEnd: Equatable where Event: Equatable, Effect: Equatable {
    @inlinable
    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.id == rhs.id && lhs.effect == rhs.effect && lhs.outcome == rhs.outcome && lhs.mapped == rhs.mapped
            && lhs.next == rhs.next
            && lhs.finish == rhs.finish
    }
}

extension EffectOutcome: Equatable {
    /// Equal when the same case; errors compare by their description.
    @inlinable
    static func == (lhs: EffectOutcome, rhs: EffectOutcome) -> Bool {
        switch (lhs, rhs) {
        case (.completed, .completed), (.cancelled, .cancelled): true
        case (.failed(let left), .failed(let right)): "\(left)" == "\(right)"
        case (.timedOut(let left), .timedOut(let right)): left == right
        default: false
        }
    }
}
