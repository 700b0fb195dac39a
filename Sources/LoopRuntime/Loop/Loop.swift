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
///   whether the event was taken. Nothing a caller does can crash the loop. Every event the loop
///   accepts is processed, or counted as dropped and reported; never silently lost.
/// - **Effects.** Those of one event are let in, in the order listed, in the same hold of the lock as
///   the update; synchronous handlers then run inline, asynchronous ones in tasks the loop tracks,
///   scheduled by each effect's ``/EffectHandlers/EffectLifecycle``.
/// - **Running and stopping.** ``run()`` runs the loop once. ``stop(gracePeriod:)`` shuts it down gracefully;
///   cancelling the task running ``run()`` stops it at once. Either way `run()` returns by the deadline,
///   even if a handler ignores cancellation (that effect is reported abandoned). ``start()`` runs it
///   without a task of its own, for loops that are many; ``waitUntilStopped()`` returns its report.
public final class Loop<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    let engine: Locked<LoopEngine<State, Event, Effect>>
    @usableFromInline
    let context: LoopContext<State, Event, Effect>
    /// The id of this loop in its group, for the group's observer; `nil` for a standalone loop.
    @usableFromInline
    let entity: (any Sendable)?
    /// The group hosting this loop, told when it stopped or its program asked it to stop; `nil` for a
    /// standalone loop, and once the group is gone. Weak, as the group holds its loops; one reference
    /// where a closure per loop cost an allocation (w3's bytes per loop, `Docs/Performance.md`).
    @usableFromInline
    weak let group: (any LoopHolder<State, Event, Effect>)?

    /// Creates a loop for `program`.
    ///
    /// - Parameters:
    ///   - program: the start and the update.
    ///   - router: how each effect is performed.
    ///   - sources: event sources, run while the loop runs.
    ///   - inbox: how many events may wait, and what happens beyond (unbounded by default).
    ///   - observer: receives everything the loop does; ``LoopLogger`` prints it, and
    ///     ``MulticastLoopObserver`` passes it to several.
    ///   - clock: the clock effect timeouts and the shutdown grace period are measured on.
    public convenience init(
        program: Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        sources: [any EventSource<Event>] = [],
        inbox: InboxPolicy = .unbounded,
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        let sink = observer.map { ActivitySink<State, Event, Effect>.observer($0) }
        self.init(
            program: program,
            context: LoopContext(router: router, sources: sources, sink: sink, clock: clock, inbox: inbox),
            entity: nil,
            group: nil
        )
    }

    @inlinable
    init(
        program: Program<State, Event, Effect>,
        context: LoopContext<State, Event, Effect>,
        entity: (any Sendable)?,
        group: (any LoopHolder<State, Event, Effect>)?
    ) {
        // `entity` is what tells a group's loop from a standalone one (``stopItself``): a group gives
        // every loop its id, a standalone loop has none.
        let first = program.first
        self.engine = Locked(
            LoopEngine(
                machine: Machine(state: first.state, update: program.update),
                settings: context,
                first: first.effects
            )
        )
        self.context = context
        self.entity = entity
        self.group = group
    }

    @inlinable
    func observe(_ activity: @autoclosure () -> LoopActivity<Event, Effect>) {
        context.observe(activity(), entity: entity) { engine.withLock { $0.state } }
    }

    // MARK: Sending

    /// Sends `event` to the loop from outside; returns whether it was taken.
    ///
    /// Never waits. While the loop runs, an event that finds nobody processing is processed on this
    /// thread before `send` returns; otherwise it is queued behind the one being processed. Before
    /// ``run()`` the event is queued and processed once the loop runs (or counted as dropped if the loop
    /// is stopped without ever running). Rejected, with the reason, once the loop is stopping or stopped,
    /// or when a bounded inbox is full and its policy rejects.
    @inlinable
    @discardableResult
    public func send(_ event: Event) -> Delivery {
        receive(event, from: .outside)
    }

    /// Sends `event`, waiting for room while a bounded inbox with the ``InboxPolicy/Overflow/suspendSender``
    /// policy is full. With any other policy, the same as ``send(_:)``.
    ///
    /// If the waiting task is cancelled, or the loop stops while it waits, the event is rejected.
    @inlinable
    @discardableResult
    public func sendWaitingForRoom(_ event: Event) async -> Delivery {
        await receiveWaitingForRoom(event, from: .outside)
    }

    /// Takes `event` from `origin`, waiting for room as ``sendWaitingForRoom(_:)`` does.
    @inlinable
    func receiveWaitingForRoom(_ event: Event, from origin: EventOrigin) async -> Delivery {
        let carried = context.carriedContext()
        // A send that finds room (nearly all) takes no waiter id from the process-wide counter and sets up
        // no cancellation handler; inlined, the drain it may start is compiled for the loop's own types.
        let taken = engine.withLock { engine -> LoopEngine<State, Event, Effect>.Reception? in
            engine.mustWait() ? nil : engine.receive(event, from: origin, context: carried)
        }
        if let taken { return conclude(taken, event) }
        return await waitForRoom(event, from: origin, context: carried)
    }

    /// For ``receiveWaitingForRoom(_:from:)``: parks `event` until the inbox has room for it, or the
    /// waiting task is cancelled.
    @usableFromInline
    func waitForRoom(_ event: Event, from origin: EventOrigin, context carried: CarriedContext?) async -> Delivery {
        let id = waiterIDs.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Delivery, Never>) in
                let reception = engine.withLock { engine -> LoopEngine<State, Event, Effect>.Reception? in
                    guard !Task.isCancelled, engine.mustWait() else {
                        return engine.receive(event, from: origin, context: carried)
                    }
                    engine.park((id, event, origin, carried, continuation))
                    return nil
                }
                if let reception { continuation.resume(returning: conclude(reception, event)) }
            }
        } onCancel: {
            if let waiter = engine.withLock({ $0.removeWaitingSender(id) }) {
                observe(.eventRejected(event, reason: .inboxFull))
                waiter.resume(returning: .rejected(.inboxFull))
            }
        }
    }

    @inlinable
    func receive(_ event: Event, from origin: EventOrigin) -> Delivery {
        let carried = context.carriedContext()
        return conclude(engine.withLock { $0.receive(event, from: origin, context: carried) }, event)
    }

    /// Does what taking `event` requires outside the lock; the delivery to return.
    @inlinable
    func conclude(_ reception: consuming LoopEngine<State, Event, Effect>.Reception, _ event: Event) -> Delivery {
        switch consume reception {
        case .queued, .processed:
            return .accepted
        case .step(let step):
            // Moved on: passed as bound, the step was copied (a retain and a release of each reference).
            drain(from: consume step)
            return .accepted
        case .droppedOldest(let oldest):
            observe(.eventDropped(oldest))
            return .accepted
        case .rejected(let rejection):
            observe(.eventRejected(event, reason: rejection))
            return .rejected(rejection)
        }
    }

    /// What handlers send through: accepted while the loop is stopping, so effects still in flight can
    /// report their results. It holds the loop strongly: the loop never stores it (no cycle).
    @inlinable
    var effectSend: Send<Event> {
        Send { event in self.receive(event, from: .effect) }
    }

    /// What sources send through: like ``send(_:)``, reported with the ``EventOrigin/source`` origin.
    @inlinable
    var sourceSend: Send<Event> {
        Send(
            { event in self.receive(event, from: .source) },
            waitingForRoom: { event in await self.receiveWaitingForRoom(event, from: .source) }
        )
    }

    // MARK: Observing

    /// The state after the last processed event.
    public var state: State {
        engine.withLock { $0.state }
    }

    /// Whether `run()` is under way: from its start until the loop has stopped.
    public var isRunning: Bool {
        engine.withLock { $0.isRunning }
    }

    /// Returns once `run()` has started the loop: `true` once it runs (at once if it is running or has
    /// run), `false` if the loop was stopped before it ever ran or the waiting task was cancelled.
    public func waitUntilRunning() async -> Bool {
        let id = waiterIDs.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let known = engine.withLock { engine -> Bool? in
                    if Task.isCancelled { return false }
                    return engine.waitForStart(id, continuation)
                }
                if let known { continuation.resume(returning: known) }
            }
        } onCancel: {
            engine.withLock { $0.removeStartWaiter(id) }?.resume(returning: false)
        }
    }

    /// Whether no event is being processed or waiting: everything sent so far, and every effect started
    /// inline because of it, has been dealt with. For test harnesses.
    package var isIdle: Bool {
        engine.withLock { $0.hasNoEventUnderWay }
    }

    /// Returns once no event is being processed or waiting (at once if that is so now). For test
    /// harnesses, which wait for the loop to settle.
    package func whenIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !engine.withLock({ $0.waitForIdle(continuation) }) { continuation.resume() }
        }
    }

    /// Whether the loop has settled now (see ``whenSettled()``).
    package var isSettled: Bool {
        engine.withLock { $0.isSettled }
    }

    /// Returns once the loop has settled: no event is queued or being processed and no effect is under
    /// way, so every event sent before the call, every effect it caused and every event those sent back
    /// have been dealt with (at once if that is so now). For tests: `loop.send(.tick)`, then
    /// `await loop.whenSettled()`, then assert the state. An effect that never ends (a source-like
    /// handler, one waiting for something the test has not done, or one waiting for a clock that does not
    /// move) keeps it from returning; a loop that is not running has settled.
    public func whenSettled() async {
        while !Task.isCancelled {
            await whenIdle()
            if isSettled { return }
            // An effect is under way; its end is not signalled to waiters, so look again shortly.
            try? await Task.sleep(for: .microseconds(200))
        }
    }

    /// How many asynchronous effects are let in, not asked to cancel, and not ended: those a recording
    /// handler has, or soon will have. For test harnesses.
    package var liveEffects: Int {
        engine.withLock { $0.liveEffects }
    }

    /// Whether the loop has a host (a loop started with ``start()`` makes one only when it first needs it),
    /// and whether that host has a task running. For tests of what an idle loop holds.
    package var hosting: (hasHost: Bool, hasTask: Bool) {
        guard let host = engine.withLock({ $0.host }) else { return (false, false) }
        return (true, host.hasTask)
    }

    /// How many tasks wait for the loop to start or to stop. For tests, which wait for them to park.
    package var phaseWaiters: Int {
        engine.withLock { $0.phaseWaiterCount }
    }

    /// How many throttle intervals are under way. For tests, which wait for one to end.
    package var throttleIntervals: Int {
        engine.withLock { $0.throttleIntervals }
    }

    /// What the loop has done so far; once stopped, how it stopped. The synchronous effects of an event
    /// are counted when the step that ran them ends: a loop abandoned in the middle of a step (its
    /// deadline, or the cancellation of `run()`'s task) adds that step's to this report after the one
    /// `run()` returned.
    public var report: LoopReport {
        engine.withLock { $0.currentReport }
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
}

/// The ids of those waiting on any loop (senders waiting for room, tasks waiting for a start or a stop,
/// followers of the states): one counter for the process, as an id only has to differ from the others
/// waiting on the same loop. A counter in each loop was 8 of its bytes (w3, `Docs/Performance.md`).
let waiterIDs = Atomic<UInt64>(0)

/// What a loop tells the group that hosts it.
@usableFromInline
enum GroupNotice: Sendable {
    /// The loop has stopped.
    case stopped
    /// The loop's program asked it to stop (``/EffectHandlers/EffectRouter/stopLoop(on:)``).
    case stopAsked
}

/// A group hosting loops: what a loop tells it.
@usableFromInline
protocol LoopHolder<State, Event, Effect>: AnyObject, Sendable {
    associatedtype State: Sendable
    associatedtype Event: Sendable
    associatedtype Effect: Sendable

    /// `loop`, one of the group's, stopped or was asked by its program to stop.
    func loop(_ loop: Loop<State, Event, Effect>, tells notice: GroupNotice)
}
