internal import EffectHandlers
internal import EventSources
internal import LoopCore
internal import Synchronization

extension Loop {
    /// Runs the loop until it stops; returns what it did.
    ///
    /// Starts the start-up effects of the program's `First`, then processes the events sent before
    /// `run()` and every event after, and runs the event sources. Returns when ``stop(gracePeriod:)`` has
    /// finished a graceful shutdown, at the end of its grace period at the latest, or at once when the
    /// task running `run()` is cancelled (the shape of a service's `run()`). Effects still running when it
    /// returns early are cancelled and reported abandoned: a handler that ignores cancellation cannot hold
    /// `run()`.
    ///
    /// - Throws: ``LoopError/alreadyRunning`` or ``LoopError/alreadyStopped``: a loop runs once.
    @inlinable
    @discardableResult
    public func run() async throws -> LoopReport {
        let (host, first) = try launch(keepingTask: true)
        // Here, not in `launch`: inlined into the caller, the drain is compiled for the loop's own types.
        // A drain started in generic code keeps going while events keep coming, and ran each of them
        // through generic-metadata lookups (a third of w2s's time, `Docs/Performance.md`).
        start(with: first)
        return await waitForEnd(of: host)
    }

    /// Waits for `host` to end (cancelled with the caller's task), then returns the report.
    @usableFromInline
    func waitForEnd(of host: Host) async -> LoopReport {
        await withTaskCancellationHandler {
            await host.ended()
        } onCancel: {
            host.cancel()
        }
        // The host ends only after the loop stopped; were it otherwise, the loop stops here.
        abandon(.cancelled)
        return report
    }

    /// Starts the loop without a task of its own: starts the program's start-up effects and processes the
    /// events queued so far on the calling thread, then returns; the loop then runs as it would in
    /// ``run()``, until it stops.
    ///
    /// For many loops, one per connection or per session, created where there is no task to give each:
    /// a started loop holds no task while nothing runs (about 1 KB plus its state, where a task parked in
    /// `run()` costs more than that on its own). Its asynchronous effects and event sources run in tasks
    /// it starts when needed, and ends when they are done. Stop it with ``stop(gracePeriod:)``: once it
    /// has started an asynchronous effect or has sources, it keeps itself alive until then, even when
    /// nobody else holds it (one that never had either is freed when dropped, without a report).
    /// ``waitUntilStopped()`` waits for its report.
    ///
    /// The difference from `run()`: nothing is cancelled with the caller's task (there is none), and
    /// asynchronous effects do not inherit the caller's task-local values or priority.
    ///
    /// - Throws: ``LoopError/alreadyRunning`` if it runs (started, or in `run()`);
    ///   ``LoopError/alreadyStopped`` if it ran, or was stopped before it started (its queued events were
    ///   then dropped: ``LoopReport/Ending/neverStarted``).
    @inlinable
    public func start() throws(LoopError) {
        // Without sources, the host is made when something needs it (`adoptedHost()`).
        let first = context.sources.isEmpty ? try claim(for: nil) : try launch(keepingTask: false).first
        // Inlined into the caller, as in `run()`.
        start(with: first)
    }

    /// Returns the loop's report once it has stopped: at once if it has, or if it was stopped before it
    /// ever ran. A loop not yet started is waited for until it has been started and stopped (or stopped
    /// without starting). Returns early, with the report so far (its `ending` is `nil`), if the waiting
    /// task is cancelled; the loop goes on. The waiting task holds the loop until then.
    public func waitUntilStopped() async -> LoopReport {
        let id = waiterIDs.add(1, ordering: .relaxed).newValue
        await withTaskCancellationHandler {
            _ = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let parked = engine.withLock { engine in
                    !Task.isCancelled && engine.waitForStop(id, continuation)
                }
                if !parked { continuation.resume(returning: false) }
            }
        } onCancel: {
            engine.withLock { $0.removeStopWaiter(id) }?.resume(returning: false)
        }
        return report
    }

    /// The host of a loop started without one, made now; `nil` if the loop does not run.
    @usableFromInline
    func adoptedHost() -> Host? {
        engine.withLock { $0.adoptHost(makeHost) }
    }

    /// A host for this loop alone, made when it first needs one: the first asynchronous effect of a
    /// started loop, or a stop that has to wait.
    func makeHost() -> Host {
        host(members: 1, sourcesStop: nil)
    }

    /// A host for this loop alone, with `members` loops on it (this one, once it has claimed it), whose
    /// shutdown fires `sourcesStop` (if the loop runs sources) and abandons the loop.
    private func host(members: Int, sourcesStop: OneShotSignal?) -> Host {
        Host(
            clock: context.clock,
            shutdown: Host.Shutdown(
                stopping: { sourcesStop?.fire() },
                deadline: { self.abandon(.deadlineExceeded) },
                cancelled: {
                    sourcesStop?.fire()
                    self.abandon(.cancelled)
                }
            ),
            members: members
        )
    }

    /// Claims the loop for a new host and starts its sources on that host; what to start with (the caller
    /// then starts it, ``start(with:)``). `keepingTask`: the host starts its task now, from the caller's
    /// task, and keeps it until the end (for `run()`).
    @usableFromInline
    func launch(keepingTask: Bool) throws(LoopError) -> (host: Host, first: Dispatch<Effect, Event>) {
        let sourcesStop = OneShotSignal()
        // No member yet: the claim joins it.
        let host = host(members: 0, sourcesStop: sourcesStop)
        let first = try claim(for: host)
        // After the claim (a loop that is already running must not get a second task), before the first
        // effects (which would otherwise start a detached one).
        if keepingTask { host.launchKeepingTask() }
        if !context.sources.isEmpty { host.startSources { await self.runSources(until: sourcesStop) } }
        return (host, first)
    }

    /// Claims the loop for `host`; what to start with. The caller holds the drain baton.
    @inlinable
    func claim(for host: Host?) throws(LoopError) -> Dispatch<Effect, Event> {
        // Joined before the claim: a stop that follows the claim at once must find the host with this
        // loop as a member, or the host would close before the loop started its effects.
        host?.join()
        let claim = engine.withLock { $0.claim(host) }
        switch claim {
        case .started(let first, let waiters):
            for waiter in waiters { waiter.resume(returning: true) }
            return first
        case .refused(let error):
            host?.leave()
            throw error
        }
    }

    /// For the claimer: starts the start-up effects, then processes the events queued so far.
    @inlinable
    func start(with first: Dispatch<Effect, Event>) {
        var tally = SyncTally()
        if !first.isEmpty { dispatch(first, send: effectSend, tally: &tally) }
        drain(from: nil, counted: tally)
        // The events sent before the start were queued: the buffer they took is not kept while the loop
        // idles (64 bytes of a group's idle loop, w3).
        engine.withLock { $0.releaseInboxIfEmpty() }
    }

    /// Stops at once (deadline or cancellation), if the loop has not stopped yet.
    func abandon(_ ending: LoopReport.Ending) {
        if let finish = engine.withLock({ $0.abandon(ending) }) { carryOut(finish) }
    }

    /// Shuts the loop down gracefully.
    ///
    /// At once, the loop stops taking events from outside (``/LoopCore/Rejection/stopping``) and its
    /// event sources are cancelled. It goes on processing the events already queued and those its
    /// effects send, and lets effects in flight finish, until `gracePeriod` (on the loop's clock) is
    /// over; then it drops what is still queued, cancels the effects still running, and `run()` (or
    /// ``waitUntilStopped()``) returns its report without waiting for them (they are reported abandoned). Calling it again while the
    /// loop stops can only bring the deadline forward: `stop(gracePeriod: .zero)` stops at once.
    ///
    /// Called before `run()` or ``start()``, it stops the loop for good: the loop never runs, and the events sent to it
    /// are dropped and counted (``LoopReport/Ending/neverStarted``).
    public func stop(gracePeriod: Duration = .seconds(30)) {
        beginStopping()?.askToStop(gracePeriod: gracePeriod)
    }

    /// Stops intake; the host the loop runs on, if it runs. The host's own stop is the caller's.
    @discardableResult
    func beginStopping() -> Host? {
        carryOut(engine.withLock { $0.stop(makeHost: makeHost) })
    }

    /// Carries out what the engine decided when asked to stop.
    @discardableResult
    func carryOut(_ stop: LoopEngine<State, Event, Effect>.Stop) -> Host? {
        switch stop {
        case .none:
            return nil
        case .alreadyStopping(let host):
            return host
        case .stopping(let host, let senders, let cancelling, let cancelled, let finish):
            for turned in senders {
                observe(.eventRejected(turned.event, reason: .stopping))
                turned.sender.resume(returning: .rejected(.stopping))
            }
            observe(.stopping)
            for handle in cancelling { handle.cancel() }
            for effect in cancelled { observe(.effectCancelled(effect.effect, id: EffectID(rawValue: effect.id))) }
            if let finish { carryOut(finish) }
            return host
        case .finished(let finish):
            carryOut(finish)
            return nil
        }
    }

    private func runSources(until stop: OneShotSignal) async {
        let send = sourceSend
        await withDiscardingTaskGroup { group in
            for source in context.sources {
                group.addTask {
                    do {
                        try await source.run(send: send)
                        self.observe(.sourceFinished)
                    } catch {
                        if !(error is CancellationError && Task.isCancelled) {
                            self.observe(.sourceFailed(error))
                        }
                    }
                }
            }
            await stop.wait()
            group.cancelAll()
        }
    }
}
