public import EffectHandlers
public import LoopCore

/// Many loops of one program, one per entity (session, job, device), hosted under a single `run()`.
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
public final class LoopGroup<ID: Hashable & Sendable, State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    struct Members {
        @usableFromInline
        var loops: [ID: Loop<State, Event, Effect>] = [:]
        @usableFromInline
        var host: Host?
        @usableFromInline
        var stopping = false
        @usableFromInline
        var stopped = false
        /// What loops that have been removed did.
        @usableFromInline
        var finished = LoopReport()

        @usableFromInline
        init() {}
    }

    @usableFromInline
    let program: @Sendable (ID) -> Program<State, Event, Effect>
    @usableFromInline
    let context: LoopContext<State, Event, Effect>
    @usableFromInline
    let members = Locked(Members())

    /// Creates an empty group.
    ///
    /// - Parameters:
    ///   - program: the program of the loop for an id, called when the id first receives an event. It is
    ///     called while the group's lock is held, so it must be quick and must not call the group.
    ///   - router: how the effects of every loop are performed.
    ///   - inbox: each loop's inbox policy.
    ///   - observer: receives what every loop does.
    ///   - clock: the clock for effect timeouts and the shutdown grace period.
    public init(
        program: @escaping @Sendable (ID) -> Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        inbox: InboxPolicy = .unbounded,
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.program = program
        self.context = LoopContext(router: router, sources: [], observer: observer, clock: clock, inbox: inbox)
    }

    /// Sends `event` to the loop for `id`, creating that loop if there is none.
    ///
    /// Thread-safe and never waits, like ``Loop/send(_:)``. Rejected with ``LoopCore/Rejection/stopping``
    /// or ``LoopCore/Rejection/stopped`` once the group is shutting down, for new and existing ids alike.
    @inlinable
    @discardableResult
    public func send(_ event: Event, to id: ID) -> Delivery {
        switch loop(for: id) {
        case .success(let loop): loop.send(event)
        case .failure(let rejection): .rejected(rejection)
        }
    }

    @inlinable
    func loop(for id: ID) -> Result<Loop<State, Event, Effect>, Rejection> {
        typealias Found = (Result<Loop<State, Event, Effect>, Rejection>, Host?, Bool)
        let (result, host, created) = members.withLock { members -> Found in
            if let loop = members.loops[id] { return (.success(loop), nil, false) }
            if members.stopped { return (.failure(.stopped), nil, false) }
            if members.stopping { return (.failure(.stopping), nil, false) }
            let loop = Loop(program: program(id), context: context) { [weak self] loop in self?.release(id, loop) }
            members.loops[id] = loop
            return (.success(loop), members.host, true)
        }
        if created, let host, case .success(let loop) = result { loop.attach(to: host) }
        return result
    }

    /// The current state of the loop for `id`, or `nil` if there is none.
    public func state(of id: ID) -> State? {
        members.withLock { $0.loops[id] }?.state
    }

    /// How many loops the group holds.
    public var count: Int {
        members.withLock { $0.loops.count }
    }

    /// The ids of the loops the group holds, in no particular order.
    public var ids: [ID] {
        members.withLock { Array($0.loops.keys) }
    }

    /// What every loop of the group has done, those removed included.
    public var report: LoopReport {
        let (finished, loops) = members.withLock { ($0.finished, Array($0.loops.values)) }
        return loops.reduce(finished) { $0.adding($1.report) }
    }

    /// Stops the loop for `id` gracefully: it takes no more events, processes those queued, lets its
    /// effects finish, and is then released. A later event for `id` starts a new loop. (Loops stopped by
    /// stopping the whole group are not released, so their final states stay readable.)
    public func remove(_ id: ID) {
        let loop = members.withLock { $0.loops[id] }
        loop?.beginStopping()
    }

    /// A loop has stopped: one that was removed is released; one stopped with the whole group stays
    /// readable through ``state(of:)``.
    @usableFromInline
    func release(_ id: ID, _ loop: Loop<State, Event, Effect>) {
        let report = loop.report
        members.withLock { members in
            guard !members.stopping, members.loops[id] === loop else { return }
            members.loops[id] = nil
            members.finished = members.finished.adding(report)
        }
    }

    /// Whether `run()` is under way.
    public var isRunning: Bool {
        members.withLock { $0.host != nil && !$0.stopped }
    }

    /// Runs every loop of the group until the group stops; returns what they did.
    ///
    /// Loops created before `run()` start now; loops created while it runs start at once. Returns after
    /// ``stop(gracePeriod:)`` has shut every loop down, or at once when the task is cancelled.
    ///
    /// - Throws: ``LoopError/alreadyRunning`` or ``LoopError/alreadyStopped``: a group runs once.
    @discardableResult
    public func run() async throws -> LoopReport {
        let host = Host()
        let existing = try members.withLock { members -> [Loop<State, Event, Effect>] in
            if members.stopped || members.stopping { throw LoopError.alreadyStopped }
            if members.host != nil { throw LoopError.alreadyRunning }
            members.host = host
            return Array(members.loops.values)
        }
        let ending = await withDiscardingTaskGroup { group in
            for loop in existing { loop.attach(to: host) }
            return await host.coordinate(
                group: &group,
                clock: context.clock,
                shutdown: Host.Shutdown(
                    stopping: {},
                    deadline: { for loop in self.allLoops() { loop.cancelEverything() } },
                    cancelled: { for loop in self.allLoops() { loop.stopAtOnce() } }
                )
            )
        }
        let remaining = members.withLock { members in
            members.stopped = true
            return Array(members.loops.values)
        }
        for loop in remaining { _ = loop.finalize(ending) }
        var report = self.report
        report.ending = ending
        return report
    }

    private func allLoops() -> [Loop<State, Event, Effect>] {
        members.withLock { Array($0.loops.values) }
    }

    /// Shuts every loop down gracefully, as ``Loop/stop(gracePeriod:)`` does for one: no new events,
    /// queued ones processed, effects given until `gracePeriod` to finish, then cancelled.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        let (host, loops) = members.withLock { members in
            members.stopping = true
            return (members.host, Array(members.loops.values))
        }
        for loop in loops { loop.beginStopping() }
        if let host {
            host.requestStop(gracePeriod: gracePeriod)
        } else {
            members.withLock { $0.stopped = true }
        }
    }
}

extension LoopReport {
    /// The counts of this report and `other` added together (the ending is kept from this one).
    func adding(_ other: LoopReport) -> LoopReport {
        var sum = self
        sum.eventsSent += other.eventsSent
        sum.eventsProcessed += other.eventsProcessed
        sum.eventsRejected += other.eventsRejected
        sum.eventsDropped += other.eventsDropped
        sum.effectsStarted += other.effectsStarted
        sum.effectsCompleted += other.effectsCompleted
        sum.effectsFailed += other.effectsFailed
        sum.effectsCancelled += other.effectsCancelled
        sum.effectsTimedOut += other.effectsTimedOut
        sum.effectsDropped += other.effectsDropped
        sum.effectsCancelledAfterStart += other.effectsCancelledAfterStart
        sum.sendersWaiting += other.sendersWaiting
        return sum
    }
}
