public import EffectHandlers
public import LoopCore
internal import Synchronization

/// Many loops of one program, one per entity (session, job, device), run under a single `run()`.
///
/// A loop is created for an id on the first event sent to it, with the program `program(id)` returns.
/// Every loop processes its own events one at a time, exactly like a standalone ``Loop``; all their
/// asynchronous effects run in the group's one task group. An idle loop owns no task, only its state
/// and a few hundred bytes of bookkeeping, so a process can host 100,000 of them. This is the
/// recommended way to run per-entity loops.
///
/// ```swift
/// let sessions = LoopGroup<SessionID, Session.State, Session.Event, Session.Effect>(
///     program: { id in Session.program(id) },
///     effects: Session.router(services)
/// )
/// sessions.send(.connected, to: id)     // creates the session's loop if needed
/// sessions.remove(id)                   // stops it; released once its effects end
/// try await sessions.run()              // until stop(gracePeriod:) or task cancellation
/// ```
///
/// Every event the group accepts is processed, or counted as dropped, by the loop it was sent to, even
/// when the group is stopped while it is still starting its loops. Events turned away for an id that has
/// no loop are counted in the group's ``report`` and reported to its observer.
public final class LoopGroup<ID: Hashable & Sendable, State: Sendable, Event: Sendable, Effect: Sendable>: Sendable,
    LoopHolder
{
    @usableFromInline
    let program: @Sendable (ID) -> Program<State, Event, Effect>
    @usableFromInline
    let context: LoopContext<State, Event, Effect>
    @usableFromInline
    let members = Locked(GroupMembers<ID, State, Event, Effect>())
    private let identifiers = Atomic<UInt64>(0)

    /// Creates an empty group.
    ///
    /// - Parameters:
    ///   - program: the program of the loop for an id, called when the id first receives an event (or its
    ///     first event after ``remove(_:)``). It is called without any lock held, so it may read the group;
    ///     if two threads create the same id at once, one of the programs is discarded.
    ///   - router: how the effects of every loop are performed.
    ///   - inbox: each loop's inbox policy.
    ///   - observer: receives what every loop does, with the id of the loop it belongs to (`nil` for what
    ///     the group as a whole does: its stop, and its report).
    ///   - clock: the clock for effect timeouts and the shutdown grace period.
    public init(
        program: @escaping @Sendable (ID) -> Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        inbox: InboxPolicy = .unbounded,
        observer: (any LoopGroupObserver<ID, Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.program = program
        let sink = observer.map { ActivitySink<State, Event, Effect>.group($0) }
        self.context = LoopContext(router: router, sources: [], sink: sink, clock: clock, inbox: inbox)
    }

    /// Creates an empty group whose every loop reports to `observer`, without the ids.
    ///
    /// The same as the initializer taking a ``LoopGroupObserver``, for an observer such as a logger that
    /// does not need to know which entity did what.
    public convenience init(
        program: @escaping @Sendable (ID) -> Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        inbox: InboxPolicy = .unbounded,
        observer: some LoopObserver<Event, Effect>,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            program: program,
            effects: router,
            inbox: inbox,
            observer: ClosureLoopGroupObserver<ID, Event, Effect> { activity, _ in observer.observe(activity) },
            clock: clock
        )
    }

    /// Creates an empty group whose every loop reports to `observer`, an observer that is both a
    /// ``LoopGroupObserver`` and a ``LoopObserver``: it is told, as a group observer, which entity did what.
    public convenience init(
        program: @escaping @Sendable (ID) -> Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        inbox: InboxPolicy = .unbounded,
        observer: some LoopGroupObserver<ID, Event, Effect> & LoopObserver<Event, Effect>,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            program: program,
            effects: router,
            inbox: inbox,
            observer: observer as any LoopGroupObserver<ID, Event, Effect>,
            clock: clock
        )
    }

    /// Sends `event` to the loop for `id`, creating that loop if there is none.
    ///
    /// Thread-safe and never waits, like ``Loop/send(_:)``. Rejected with ``/LoopCore/Rejection/stopping``
    /// or ``/LoopCore/Rejection/stopped`` once the group is shutting down, for new and existing ids alike.
    @inlinable
    @discardableResult
    public func send(_ event: Event, to id: ID) -> Delivery {
        deliver(event, to: id).delivery
    }

    /// Sends `event` to the loop for `id`, creating it if needed; the delivery, and the loop that took
    /// the event.
    @inlinable
    func deliver(
        _ event: Event,
        to id: ID,
        holding request: (any PendingRequest)? = nil
    ) -> (delivery: Delivery, loop: Loop<State, Event, Effect>?) {
        switch members.withLock({ $0.lookup(id) }) {
        case .found(let loop):
            return (request.map { loop.receive(event, from: .outside, holding: $0) } ?? loop.send(event), loop)
        case .rejected(let rejection):
            context.observeGroup(.eventRejected(event, reason: rejection), entity: id)
            return (.rejected(rejection), nil)
        case .absent:
            let (delivery, loop) = create(id, with: event)
            if let request, delivery.isAccepted { loop?.hold(request) }
            return (delivery, loop)
        }
    }

    /// Creates the loop for `id`, outside the lock, and inserts it with `event`.
    @inlinable
    func create(_ id: ID, with event: Event) -> (delivery: Delivery, loop: Loop<State, Event, Effect>?) {
        let loop = Loop(program: program(id), context: context, entity: id, group: self)
        let carried = context.carriedContext()
        let insertion = members.withLock { $0.insert(loop, for: id, event: event, context: carried) }
        switch insertion {
        case .found(let existing):
            return (existing.send(event), existing)
        case .rejected(let rejection):
            context.observeGroup(.eventRejected(event, reason: rejection), entity: id)
            return (.rejected(rejection), nil)
        case .inserted(let delivery, let first):
            if case .rejected(let rejection) = delivery {
                context.observeGroup(.eventRejected(event, reason: rejection), entity: id)
            }
            if let first { loop.start(with: first) }
            return (delivery, loop)
        }
    }

    /// Sends the event `make` builds around a new ``/LoopCore/ReplyTo`` to the loop for `id` (creating
    /// it if needed) and waits for the reply its update decides, exactly as ``Loop/request(timeout:_:)``
    /// does for a standalone loop, with the same errors.
    ///
    /// ```swift
    /// let balance = try await accounts.request(to: accountID, timeout: .seconds(1)) { .balance(replyTo: $0) }
    /// ```
    @inlinable
    public func request<Value: Sendable>(
        to id: ID,
        timeout: Duration? = nil,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await Requests.ask(timeout: timeout, clock: context.clock, make: make) { event, waiter in
            deliver(event, to: id, holding: waiter).delivery
        }
    }

    /// The current state of the loop for `id`, or `nil` if there is none.
    public func state(of id: ID) -> State? {
        members.withLock { $0.loop(for: id) }?.state
    }

    /// The states of the loop for `id`, as ``Loop/states`` gives them, or `nil` if there is no loop for
    /// `id` now. The sequence ends when that loop stops (removed, passivated, or the group stopped).
    public func states(of id: ID) -> LoopStates<State>? {
        members.withLock { $0.loop(for: id) }?.states
    }

    /// Returns once every loop of the group has settled (see ``Loop/whenSettled()``), all at the same
    /// time: an effect of one loop that sends to another is followed there too. For tests.
    public func whenSettled() async {
        while !Task.isCancelled {
            let loops = members.withLock { $0.all }
            for loop in loops { await loop.whenSettled() }
            // Settled only if nothing moved meanwhile: the same loops, each still settled.
            let again = members.withLock { $0.all }
            let same = Set(again.map(ObjectIdentifier.init)) == Set(loops.map(ObjectIdentifier.init))
            if same, again.allSatisfy({ $0.isSettled }) { return }
        }
    }

    /// How many loops the group holds (removed loops still finishing their effects not included).
    public var count: Int {
        members.withLock { $0.count }
    }

    /// The ids of the loops the group holds, in no particular order.
    public var ids: [ID] {
        members.withLock { $0.ids }
    }

    /// What every loop of the group has done, those removed included, and the events turned away for ids
    /// that had no loop.
    public var report: LoopReport {
        let (finished, loops) = members.withLock { $0.reporting }
        return loops.reduce(finished) { $0.adding($1.report) }
    }

    /// Stops the loop for `id` gracefully and takes it out of the group at once: a later event for `id`
    /// starts a new loop (the old one's remaining effects report to the old one, which is released once
    /// they end). Loops stopped by stopping the whole group are not removed, so their final states stay
    /// readable.
    public func remove(_ id: ID) {
        members.withLock { $0.remove(id) }?.beginStopping()
    }

    /// A loop's program asked it to stop: it leaves the group as a removed one does.
    /// Removes the loop of `id` if it is quiet: nothing queued or being processed, no effect under way,
    /// and `quiet` accepts its state. Checked and stopped in one hold of the loop's lock, so no event
    /// reaches it in between; a sender that had already found it is rejected (`stopping`) and, looking
    /// again, starts a new loop for `id`. Returns whether it was removed. How a durable group passivates.
    package func passivate(_ id: ID, when quiet: (State) -> Bool) -> Bool {
        let stopped = members.withLock { members in
            members.removeIf(id) { loop in loop.engine.withLock { $0.stopIfQuiet(quiet) } }
        }
        guard let (loop, stop) = stopped else { return false }
        loop.carryOut(stop)
        return true
    }

    @usableFromInline
    func retire(_ loop: Loop<State, Event, Effect>) {
        let retiring = members.withLock { $0.retire(loop) }
        if retiring { loop.beginStopping() }
    }

    /// A loop has stopped: one that was removed is released.
    @inlinable
    func release(_ loop: Loop<State, Event, Effect>) {
        let report = loop.report
        members.withLock { $0.release(loop, report: report) }
    }

    /// `loop` stopped (it is released, if it was removed) or its program asked it to stop (it retires).
    @usableFromInline
    func loop(_ loop: Loop<State, Event, Effect>, tells notice: GroupNotice) {
        switch notice {
        case .stopped: release(loop)
        case .stopAsked: retire(loop)
        }
    }

    /// Whether `run()` is under way.
    public var isRunning: Bool {
        members.withLock { $0.isRunning }
    }

    /// Returns once `run()` has started the group: `true` once it runs (at once if it is running or has
    /// run), `false` if it was stopped before it ever ran or the waiting task was cancelled.
    public func waitUntilRunning() async -> Bool {
        let id = identifiers.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let known = members.withLock { members -> Bool? in
                    Task.isCancelled ? false : members.waitForStart(id, continuation)
                }
                if let known { continuation.resume(returning: known) }
            }
        } onCancel: {
            members.withLock { $0.removeStartWaiter(id) }?.resume(returning: false)
        }
    }

    /// Runs every loop of the group until the group stops; returns what they did.
    ///
    /// Loops created before `run()` start now; loops created while it runs start at once. Returns after
    /// ``stop(gracePeriod:)`` has shut every loop down (at the end of the grace period at the latest), or at
    /// once when the task is cancelled.
    ///
    /// - Throws: ``LoopError/alreadyRunning`` or ``LoopError/alreadyStopped``: a group runs once.
    @inlinable
    @discardableResult
    public func run() async throws -> LoopReport {
        let (host, started) = try launch()
        // Here, inlined into the caller, so each drain is compiled for the loops' own types (as in
        // ``Loop/run()``).
        for (loop, first) in started { loop.start(with: first) }
        return await waitForEnd(of: host)
    }

    /// Starts the group on a new host; the loops created before, each with what to start it with.
    @usableFromInline
    func launch() throws -> (Host, [(Loop<State, Event, Effect>, Dispatch<Effect, Event>)]) {
        let host = Host(
            clock: context.clock,
            shutdown: Host.Shutdown(
                stopping: {},
                deadline: { for loop in self.members.withLock({ $0.all }) { loop.abandon(.deadlineExceeded) } },
                cancelled: { for loop in self.members.withLock({ $0.all }) { loop.abandon(.cancelled) } }
            )
        )
        let (started, waiters) = try members.withLock { try $0.start(host) }
        host.launchKeepingTask()
        for waiter in waiters { waiter.resume(returning: true) }
        return (host, started)
    }

    /// Waits for `host` to end (cancelled with the caller's task), ends what is left, and returns the
    /// group's report.
    @usableFromInline
    func waitForEnd(of host: Host) async -> LoopReport {
        await withTaskCancellationHandler {
            await host.ended()
        } onCancel: {
            host.cancel()
        }
        let loops = members.withLock { $0.end() }
        for loop in loops { loop.abandon(.cancelled) }
        let endings = Set(loops.compactMap { $0.report.ending })
        var report = self.report
        report.ending =
            endings.contains(.cancelled)
            ? .cancelled : endings.contains(.deadlineExceeded) ? .deadlineExceeded : .drained
        members.withLock { $0.ended(report.ending) }
        context.observeGroup(.stopped(report), entity: nil)
        return report
    }

    /// Shuts every loop down gracefully, as ``Loop/stop(gracePeriod:)`` does for one: no new events,
    /// queued ones processed, effects given until `gracePeriod` to finish; then what is left is dropped,
    /// cancelled or abandoned, and `run()` returns. Called again while the group stops, it can only bring
    /// the deadline forward. Called before `run()`, it stops the group for good: its loops never run, and
    /// the events sent to them are dropped and counted.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        guard let stop = members.withLock({ $0.stop() }) else { return }
        if stop.host != nil && stop.first { context.observeGroup(.stopping, entity: nil) }
        for loop in stop.loops { loop.beginStopping() }
        // A later stop only brings the deadline forward, if its grace period is shorter.
        if let host = stop.host { host.askToStop(gracePeriod: gracePeriod) }
        for waiter in stop.startWaiters { waiter.resume(returning: false) }
    }
}
