public import EffectHandlers
public import EventSources
public import LoopCore
internal import Synchronization

/// Runs a program: processes its events one at a time, performs its effects through the router's
/// handlers, and feeds its event sources in.
///
/// ```swift
/// let loop = Loop(
///     program: Program(first: First(state: State()), update: Update(Worker.update)),
///     effects: EffectRouter<Effect, Event>().route({ $0 }, to: WorkerHandler(services: services)),
///     sources: [SignalSource([.terminate]) { _ in .shutdown }]
/// )
/// loop.send(.submitted(job))           // from any thread; never waits
/// try await loop.run()                 // until stop(gracePeriod:) or task cancellation
/// ```
///
/// - **Ordering.** Events are processed strictly one at a time, in the order they were taken. An event
///   sent while another is being processed (by an observer, a handler or a source) is queued behind
///   it, never processed re-entrantly. The update runs on the thread that found the loop idle.
/// - **Sending.** ``send(_:)`` is synchronous, thread-safe, and never waits for effects; it returns
///   whether the event was taken. Nothing a caller does can crash the loop.
/// - **Effects.** Those of one event start in the order listed: synchronous handlers inline, right
///   after the update; asynchronous handlers in child tasks of the task group ``run()`` owns,
///   scheduled by each effect's ``EffectHandlers/EffectLifecycle``.
/// - **Lifecycle.** ``run()`` runs the loop once, in structured concurrency. ``stop(gracePeriod:)``
///   shuts it down gracefully; cancelling the task running ``run()`` stops it at once.
public final class Loop<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    let storage: Locked<LoopEngine<State, Event, Effect>>
    @usableFromInline
    let firstEffects: [Effect]
    @usableFromInline
    let context: LoopContext<State, Event, Effect>
    /// Called once when this loop, hosted by a group and asked to stop, has nothing left to do.
    @usableFromInline
    let onQuiesced: (@Sendable (Loop) -> Void)?
    private let identifiers = Atomic<UInt64>(0)
    private let syncCompleted = Atomic<Int>(0)
    private let syncFailed = Atomic<Int>(0)

    /// Counts how a synchronous effect (or an unrouted one) ended; such an effect counts as started once it
    /// has ended, so one atomic operation records both.
    @usableFromInline
    func countSync(completed: Bool) {
        if completed {
            syncCompleted.add(1, ordering: .relaxed)
        } else {
            syncFailed.add(1, ordering: .relaxed)
        }
    }

    /// Creates a loop for `program`.
    ///
    /// - Parameters:
    ///   - program: the start and the update.
    ///   - router: how each effect is performed.
    ///   - sources: event sources, run while the loop runs.
    ///   - inbox: how many events may wait, and what happens beyond (unbounded by default).
    ///   - observer: receives everything the loop does; ``LoopLogger`` prints it.
    ///   - clock: the clock effect timeouts and the shutdown grace period are measured on.
    public convenience init(
        program: Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        sources: [any EventSource<Event>] = [],
        inbox: InboxPolicy = .unbounded,
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            program: program,
            context: LoopContext(router: router, sources: sources, observer: observer, clock: clock, inbox: inbox),
            onQuiesced: nil
        )
    }

    @inlinable
    init(
        program: Program<State, Event, Effect>,
        context: LoopContext<State, Event, Effect>,
        onQuiesced: (@Sendable (Loop) -> Void)?
    ) {
        let first = program.first
        self.storage = Locked(
            LoopEngine(
                machine: Machine(state: first.state, update: program.update),
                policy: context.inbox,
                timed: context.observer != nil
            )
        )
        self.firstEffects = first.effects
        self.context = context
        self.onQuiesced = onQuiesced
    }

    // MARK: Sending

    /// Sends `event` to the loop from outside; returns whether it was taken.
    ///
    /// Never waits: if the loop is idle the event is processed on this thread before `send` returns,
    /// otherwise it is queued. Rejected, with the reason, once the loop is stopping or stopped, or
    /// when a bounded inbox is full and its policy rejects.
    @inlinable
    @discardableResult
    public func send(_ event: Event) -> Delivery {
        receive(event, from: .outside)
    }

    /// Sends `event`, waiting for room while a bounded inbox with the ``InboxPolicy/Overflow/suspendSender``
    /// policy is full. With any other policy, the same as ``send(_:)``.
    ///
    /// If the waiting task is cancelled, or the loop stops while it waits, the event is rejected.
    @discardableResult
    public func sendWaitingForRoom(_ event: Event) async -> Delivery {
        let id = identifiers.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Delivery, Never>) in
                let reception = storage.withLock { engine -> LoopEngine<State, Event, Effect>.Reception? in
                    guard !Task.isCancelled, engine.mustWait(for: event) else {
                        return engine.receive(event, from: .outside)
                    }
                    engine.enqueueWaitingSender(id, event, continuation)
                    return nil
                }
                if let reception { continuation.resume(returning: conclude(reception, event)) }
            }
        } onCancel: {
            if let waiter = storage.withLock({ $0.removeWaitingSender(id) }) {
                context.observe(.eventRejected(event, reason: .inboxFull))
                waiter.resume(returning: .rejected(.inboxFull))
            }
        }
    }

    @inlinable
    func receive(_ event: Event, from origin: Origin) -> Delivery {
        conclude(storage.withLock { $0.receive(event, from: origin) }, event)
    }

    @inlinable
    func conclude(_ reception: LoopEngine<State, Event, Effect>.Reception, _ event: Event) -> Delivery {
        switch reception {
        case .queued, .processed:
            return .accepted
        case .process(let step):
            drain(from: step)
            return .accepted
        case .droppedOldest(let oldest):
            context.observe(.eventDropped(oldest))
            return .accepted
        case .rejected(let rejection):
            context.observe(.eventRejected(event, reason: rejection))
            return .rejected(rejection)
        }
    }

    /// What handlers send through: accepted while the loop is stopping, so effects still in flight can
    /// report their results. It holds the loop strongly: the loop never stores it (no cycle), and the
    /// effect tasks holding it end before the loop stops.
    @inlinable
    var insideSend: Send<Event> {
        Send { event in self.receive(event, from: .inside) }
    }

    /// What sources send through: like ``send(_:)``.
    @inlinable
    var outsideSend: Send<Event> {
        Send { event in self.receive(event, from: .outside) }
    }

    // MARK: Observing

    /// The state after the last processed event.
    public var state: State {
        storage.withLock { $0.machine.state }
    }

    /// Whether `run()` is under way: from its start until it returns.
    public var isRunning: Bool {
        storage.withLock { engine in
            switch engine.phase {
            case .running, .stopping, .cancelling: true
            case .idle, .stopped: false
            }
        }
    }

    /// Whether no event is being processed or waiting: everything sent so far, and every effect started
    /// inline because of it, has been dealt with. For test harnesses.
    package var isIdle: Bool {
        storage.withLock { !$0.draining && $0.inbox.isEmpty }
    }

    /// What the loop has done so far; once stopped, how it stopped.
    public var report: LoopReport {
        var report = storage.withLock { engine in
            var report = engine.report
            report.sendersWaiting = engine.waitingSenders.count
            return report
        }
        let (completed, failed) = (syncCompleted.load(ordering: .relaxed), syncFailed.load(ordering: .relaxed))
        report.effectsStarted += completed + failed
        report.effectsCompleted += completed
        report.effectsFailed += failed
        return report
    }

    /// The loop's states as they change, for consumers such as a status endpoint.
    ///
    /// Each iteration first yields the current state, then the latest state whenever it has changed
    /// since the consumer last looked: a slow consumer skips intermediate states instead of
    /// buffering them, so memory stays at one state per consumer whatever the event rate. The sequence
    /// ends when the loop stops.
    public var states: LoopStates<State> {
        LoopStates(feed: self)
    }

    // MARK: Processing

    /// Processes events, starting with `first`, until the inbox is empty.
    @inlinable
    func drain(from first: Step<State, Event, Effect>?) {
        var send: Send<Event>?
        var step = first
        while true {
            if let current = step {
                conclude(current)
                if !current.effects.isEmpty {
                    let sender = send ?? insideSend
                    send = sender
                    dispatch(current.effects, send: sender)
                }
            }
            let (next, leaving) = storage.withLock { engine -> (LoopEngine<State, Event, Effect>.Next, Host?) in
                let next = engine.nextStep()
                if case .idle = next { return (next, engine.hostToLeave()) }
                return (next, nil)
            }
            switch next {
            case .step(let following):
                step = following
            case .again:
                step = nil
            case .idle:
                if let leaving { quiesced(leaving) }
                return
            }
        }
    }

    /// Starts draining events queued while nobody was processing (before `run()`).
    @inlinable
    func drainQueued() {
        let claimed = storage.withLock { engine in
            guard !engine.draining else { return false }
            engine.draining = true
            return true
        }
        if claimed { drain(from: nil) }
    }

    @inlinable
    func conclude(_ step: Step<State, Event, Effect>) {
        if let duration = step.duration {
            context.observe(.eventProcessed(step.event, duration: duration, inboxDepth: step.inboxDepth))
        }
        step.wakeups?.resume()
    }

    /// Starts `effects` in order.
    @inlinable
    func dispatch(_ effects: [Effect], send: Send<Event>) {
        for effect in effects {
            let lifecycle = context.router.lifecycle(of: effect)
            if lifecycle.policy == .cancel, let key = lifecycle.key {
                let (handles, queued) = storage.withLock { $0.cancel(key) }
                for cancel in handles { cancel() }
                for cancelled in queued { context.observe(.effectCancelled(cancelled)) }
                continue
            }
            switch context.router.performer(for: effect) {
            case .sync(let perform):
                performSync(effect, lifecycle, perform, send: send)
            case .async(let perform):
                start(effect, lifecycle, perform)
            case nil:
                countSync(completed: false)
                reportFailure(of: effect, EffectError.unrouted, send: send)
            }
        }
    }

    @inlinable
    func performSync(
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @Sendable (Effect, Send<Event>) throws -> Void,
        send: Send<Event>
    ) {
        context.observe(.effectStarted(effect, lifecycle: lifecycle))
        do {
            try perform(effect, send)
            countSync(completed: true)
            context.observe(.effectCompleted(effect))
        } catch {
            countSync(completed: false)
            reportFailure(of: effect, error, send: send)
        }
    }

    /// Reports a failed effect and sends the event the program maps its error to, if any.
    @inlinable
    func reportFailure(of effect: Effect, _ error: any Error, send: Send<Event>) {
        let mapped = context.router.event(for: error, of: effect)
        context.observe(.effectFailed(effect, error: error, mappedTo: mapped))
        if let mapped { send(mapped) }
    }

    @inlinable
    func start(
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void
    ) {
        let (admission, host) = storage.withLock { ($0.admit(effect, lifecycle, perform), $0.host) }
        switch admission {
        case .start(let id, let cancelling, let cancelledQueued):
            for cancel in cancelling { cancel() }
            for cancelled in cancelledQueued { context.observe(.effectCancelled(cancelled)) }
            spawn(QueuedEffect(id: id, effect: effect, lifecycle: lifecycle, perform: perform), on: host)
        case .queued:
            break
        case .dropped:
            context.observe(.effectDropped(effect))
        case .refused:
            context.observe(.effectCancelled(effect))
        }
    }

    /// Hands an admitted effect to the task group; it counts as started from here, in dispatch order.
    @inlinable
    func spawn(_ effect: QueuedEffect<Effect, Event>, on host: Host?) {
        context.observe(.effectStarted(effect.effect, lifecycle: effect.lifecycle))
        let job = Host.Job(
            run: { await self.perform(effect, on: host) },
            abandon: { self.finish(effect, .cancelled, on: host) }
        )
        guard let host else { return job.abandon() }
        host.spawn(job)
    }

    /// Runs one asynchronous effect in its task, then accounts for it.
    @inlinable
    func perform(_ effect: QueuedEffect<Effect, Event>, on host: Host?) async {
        let send = insideSend
        let result =
            if effect.lifecycle.key == nil && effect.lifecycle.timeout == nil {
                await Self.outcome { try await effect.perform(effect.effect, send) }
            } else {
                await performControlled(effect, send: send)
            }
        finish(effect, result, on: host)
    }

    /// Runs an effect that may be cancelled on its own or time out: the handler runs in a task whose
    /// handle the loop keeps, and which this task awaits, so it never outlives the loop's task group.
    @inlinable
    func performControlled(_ effect: QueuedEffect<Effect, Event>, send: Send<Event>) async -> EffectOutcome {
        let id = effect.id
        guard !storage.withLock({ $0.isCancelled(id) }) else { return .cancelled }
        let work = Task { await Self.outcome { try await effect.perform(effect.effect, send) } }
        if !storage.withLock({ $0.attach(id, cancel: { work.cancel() }) }) { work.cancel() }
        var timer: Task<Void, Never>?
        if let timeout = effect.lifecycle.timeout {
            let clock = context.clock
            // The timer holds the lock's storage, not the loop: it is cancelled and awaited before this
            // function returns, so it needs no weak reference (whose side table outlived the loop).
            let storage = self.storage
            timer = Task {
                do { try await clock.sleep(for: timeout) } catch { return }
                storage.withLock { $0.timeOut(id, after: timeout) }?()
            }
        }
        let result = await withTaskCancellationHandler {
            await work.value
        } onCancel: {
            work.cancel()
        }
        if let timer {
            timer.cancel()
            await timer.value
        }
        return result
    }

    @inlinable
    static func outcome(_ body: () async throws -> Void) async -> EffectOutcome {
        do {
            try await body()
            return .completed
        } catch {
            return error is CancellationError && Task.isCancelled ? .cancelled : .failed(error)
        }
    }

    /// Accounts for an ended effect: reports it, sends the event its error maps to (while it still
    /// counts as in flight, so shutdown waits for that event), and starts the next one queued behind it.
    @inlinable
    func finish(_ effect: QueuedEffect<Effect, Event>, _ result: EffectOutcome, on host: Host?) {
        // Only a keyed or timed effect can have been cancelled or timed out by the loop itself.
        let controlled = effect.lifecycle.key != nil || effect.lifecycle.timeout != nil
        let outcome = controlled ? storage.withLock { $0.resolve(effect.id, result) } : result
        let send = insideSend
        switch outcome {
        case .completed:
            context.observe(.effectCompleted(effect.effect))
        case .failed(let error):
            reportFailure(of: effect.effect, error, send: send)
        case .cancelled:
            context.observe(.effectCancelled(effect.effect))
        case .timedOut(let timeout):
            let mapped = context.router.event(for: EffectError.timedOut(after: timeout), of: effect.effect)
            context.observe(.effectTimedOut(effect.effect, timeout: timeout, mappedTo: mapped))
            if let mapped { send(mapped) }
        }
        let (next, leaving) = storage.withLock { engine in
            (engine.finish(effect.id, effect.lifecycle, outcome), engine.hostToLeave())
        }
        if let next { spawn(next, on: host) }
        if let leaving { quiesced(leaving) }
    }

    // MARK: Lifecycle

    /// Runs the loop until it stops; returns what it did.
    ///
    /// Starts the start-up effects of the program's `First`, then processes the events sent before
    /// `run()` and every event after, and runs the event sources, all within one task group, so nothing
    /// the loop starts outlives this call. Returns after ``stop(gracePeriod:)`` has finished a graceful
    /// shutdown, or at once when the task is cancelled (the shape of a service's `run()`).
    ///
    /// - Throws: ``LoopError/alreadyRunning`` or ``LoopError/alreadyStopped``: a loop runs once.
    @discardableResult
    public func run() async throws -> LoopReport {
        let host = Host()
        if let refusal = claim(host) { throw refusal }
        let sourcesStop = OneShotSignal()
        let ending = await withDiscardingTaskGroup { group in
            if !context.sources.isEmpty { group.addTask { await self.runSources(until: sourcesStop) } }
            start(on: host)
            return await host.coordinate(
                group: &group,
                clock: context.clock,
                shutdown: Host.Shutdown(
                    stopping: { sourcesStop.fire() },
                    deadline: { self.cancelEverything() },
                    cancelled: {
                        sourcesStop.fire()
                        self.stopAtOnce()
                    }
                )
            )
        }
        return finalize(ending)
    }

    /// Claims the loop for running on `host`, in one step; why it cannot run, if it cannot.
    @inlinable
    func claim(_ host: Host) -> LoopError? {
        storage.withLock { engine in
            switch engine.phase {
            case .idle:
                engine.phase = .running
                engine.host = host
                return nil
            case .running, .stopping, .cancelling: return .alreadyRunning
            case .stopped: return .alreadyStopped
            }
        }
    }

    /// Runs on `host` from now on: the start-up effects, then the events queued so far. The loop must
    /// have been claimed for `host`.
    @inlinable
    func start(on host: Host) {
        host.join()
        dispatch(firstEffects, send: insideSend)
        drainQueued()
    }

    /// Claims and starts the loop on `host` if it is idle (how a group starts its loops).
    @inlinable
    func attach(to host: Host) {
        if claim(host) == nil { start(on: host) }
    }

    /// Called once, when shutdown has nothing left to wait for.
    @inlinable
    func quiesced(_ host: Host) {
        if let onQuiesced {
            _ = finalize(.drained)
            onQuiesced(self)
        }
        host.leave()
    }

    /// Drops queued events and cancels everything: the task running the loop was cancelled.
    func stopAtOnce() {
        let dropped = storage.withLock { engine in
            engine.phase = .cancelling
            return engine.dropQueuedEvents()
        }
        for event in dropped { context.observe(.eventDropped(event)) }
        cancelEverything()
    }

    /// Stops taking anything, and cancels every effect in flight or queued.
    func cancelEverything() {
        let (queued, senders, handles, leaving) = storage.withLock { engine in
            engine.phase = .cancelling
            let queued = engine.cancelEverything()
            let handles = engine.controlled.values.compactMap(\.cancel)
            return (queued, engine.rejectWaitingSenders(), handles, engine.hostToLeave())
        }
        for effect in queued { context.observe(.effectCancelled(effect)) }
        for sender in senders { sender.resume(returning: .rejected(.stopping)) }
        for cancel in handles { cancel() }
        if let leaving { quiesced(leaving) }
    }

    /// Records how the loop stopped and releases everyone still waiting on it.
    @usableFromInline
    func finalize(_ ending: LoopReport.Ending) -> LoopReport {
        let (subscribers, senders) = storage.withLock { engine in
            engine.phase = .stopped
            engine.report.ending = ending
            engine.host = nil
            return (engine.finishSubscribers(), engine.rejectWaitingSenders())
        }
        for subscriber in subscribers { subscriber.resume(returning: nil) }
        for sender in senders { sender.resume(returning: .rejected(.stopped)) }
        let report = self.report
        context.observe(.stopped(report))
        return report
    }

    /// Shuts the loop down gracefully.
    ///
    /// At once, the loop stops taking events from outside (``LoopCore/Rejection/stopping``) and its
    /// event sources are cancelled. It goes on processing the events already queued and those its
    /// effects send, and lets effects in flight finish, until `gracePeriod` (on the loop's clock) is
    /// over; then it cancels the effects still in flight. `run()` returns the report when all is done.
    /// Calling it before `run()` stops the loop for good; calling it again changes nothing.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        if let host = beginStopping() { host.requestStop(gracePeriod: gracePeriod) }
    }

    /// Stops intake; returns the host the loop runs on, if it runs.
    @discardableResult
    func beginStopping() -> Host? {
        let (host, wasIdle, senders, leaving) = storage.withLock { engine in
            switch engine.phase {
            case .idle:
                engine.phase = .stopped
                engine.report.ending = .drained
                return (nil as Host?, true, engine.rejectWaitingSenders(), nil as Host?)
            case .running:
                engine.phase = .stopping
                return (engine.host, false, engine.rejectWaitingSenders(), engine.hostToLeave())
            case .stopping, .cancelling, .stopped:
                return (nil, false, [], nil)
            }
        }
        for sender in senders { sender.resume(returning: .rejected(.stopping)) }
        if host != nil { context.observe(.stopping) }
        if wasIdle { _ = finalize(.drained) }
        if let leaving { quiesced(leaving) }
        return host
    }

    private func runSources(until stop: OneShotSignal) async {
        let send = outsideSend
        await withDiscardingTaskGroup { group in
            for source in context.sources {
                group.addTask {
                    do {
                        try await source.run(send: send)
                        self.context.observe(.sourceFinished)
                    } catch {
                        if !(error is CancellationError && Task.isCancelled) {
                            self.context.observe(.sourceFailed(error))
                        }
                    }
                }
            }
            await stop.wait()
            group.cancelAll()
        }
    }
}

extension Loop: StateFeed {
    func subscribe() -> UInt64 {
        let id = identifiers.add(1, ordering: .relaxed).newValue
        storage.withLock { $0.subscribe(id) }
        return id
    }

    func nextState(for id: UInt64) async -> State? {
        switch storage.withLock({ $0.poll(id) }) {
        case .value(let state): return state
        case .finished: return nil
        case .wait: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<State?, Never>) in
                let ready = storage.withLock { engine -> LoopEngine<State, Event, Effect>.Poll? in
                    let poll = engine.poll(id)
                    guard case .wait = poll, !Task.isCancelled else { return poll }
                    engine.subscribers[id]?.waiter = continuation
                    return nil
                }
                switch ready {
                case .value(let state): continuation.resume(returning: state)
                case .finished, .wait: continuation.resume(returning: nil)
                case nil: break
                }
            }
        } onCancel: {
            storage.withLock { $0.unsubscribe(id) }?.resume(returning: nil)
        }
    }

    func unsubscribe(_ id: UInt64) {
        storage.withLock { $0.unsubscribe(id) }?.resume(returning: nil)
    }
}
