internal import EffectHandlers
internal import EventSources
internal import LoopCore

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
    @discardableResult
    public func run() async throws -> LoopReport {
        let host = Host(clock: context.clock)
        let first = try claim(for: host)
        let sourcesStop = OneShotSignal()
        let sources: (@Sendable () async -> Void)? =
            context.sources.isEmpty ? nil : { @Sendable in await self.runSources(until: sourcesStop) }
        host.launch(
            sources: sources,
            shutdown: Host.Shutdown(
                stopping: { sourcesStop.fire() },
                deadline: { self.expire(.deadlineExceeded) },
                cancelled: {
                    sourcesStop.fire()
                    self.expire(.cancelled)
                }
            )
        )
        start(with: first)
        await withTaskCancellationHandler {
            await host.ended()
        } onCancel: {
            host.cancel()
        }
        // The host ends only after the loop stopped; were it otherwise, the loop stops here.
        expire(.cancelled)
        return report
    }

    /// Claims the loop for `host`; what to start with. The caller holds the drain baton.
    @inlinable
    func claim(for host: Host) throws(LoopError) -> Dispatch<Effect, Event> {
        // Joined before the claim: a stop that follows the claim at once must find the host with this
        // loop as a member, or the host would close before the loop started its effects.
        host.join()
        let claim = storage.withLock { $0.claim(host, first: firstEffects) }
        switch claim {
        case .started(let first, let waiters):
            for waiter in waiters { waiter.resume(returning: true) }
            return first
        case .refused(let error):
            host.leave()
            throw error
        }
    }

    /// For the claimer: starts the start-up effects, then processes the events queued so far.
    @inlinable
    func start(with first: Dispatch<Effect, Event>) {
        if !first.isEmpty { dispatch(first, send: effectSend) }
        drain(from: nil)
    }

    /// Stops at once (deadline or cancellation), if the loop has not stopped yet.
    func expire(_ ending: LoopReport.Ending) {
        if let finish = storage.withLock({ $0.expire(ending) }) { complete(finish) }
    }

    /// Shuts the loop down gracefully.
    ///
    /// At once, the loop stops taking events from outside (``/LoopCore/Rejection/stopping``) and its
    /// event sources are cancelled. It goes on processing the events already queued and those its
    /// effects send, and lets effects in flight finish, until `gracePeriod` (on the loop's clock) is
    /// over; then it drops what is still queued, cancels the effects still running, and `run()` returns
    /// its report without waiting for them (they are reported abandoned). Calling it again while the
    /// loop stops can only bring the deadline forward: `stop(gracePeriod: .zero)` stops at once.
    ///
    /// Called before `run()`, it stops the loop for good: the loop never runs, and the events sent to it
    /// are dropped and counted (``LoopReport/Ending/neverStarted``).
    public func stop(gracePeriod: Duration = .seconds(30)) {
        beginStopping()?.requestStop(gracePeriod: gracePeriod)
    }

    /// Stops intake; the host the loop runs on, if it runs. The host's own stop is the caller's.
    @discardableResult
    func beginStopping() -> Host? {
        perform(storage.withLock { $0.stop() })
    }

    /// Carries out what the engine decided when asked to stop.
    @discardableResult
    func perform(_ stop: LoopEngine<State, Event, Effect>.Stop) -> Host? {
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
            for effect in cancelled { observe(.effectCancelled(effect)) }
            if let finish { complete(finish) }
            return host
        case .finished(let finish):
            complete(finish)
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
