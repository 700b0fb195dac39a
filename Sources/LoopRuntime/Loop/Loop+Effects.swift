public import EffectHandlers
public import LoopCore

extension Loop {
    /// Hands an admitted effect to the host's task group. An uncontrolled effect counts as started here,
    /// in the order its event listed it (nothing but the loop's stop can cancel it before its task runs);
    /// a controlled one when its task begins, since its key can cancel it before.
    @inlinable
    func spawn(_ admitted: Admitted<Effect, Event>, on host: Host?) {
        if !admitted.isControlled {
            observe(.effectStarted(admitted.effect, id: EffectID(rawValue: admitted.id), lifecycle: admitted.lifecycle))
        }
        if let start = admitted.start, !admitted.isControlled {
            return startInline(admitted, start, on: host)
        }
        let job = Host.Job(
            run: { await self.perform(admitted) },
            cancel: { self.ended(admitted, .cancelled) }
        )
        guard let host = host ?? adoptedHost() else { return job.cancel() }
        host.spawn(job)
    }

    /// Starts an uncontrolled effect whose route completes it, on this thread; it ends when its route
    /// calls the completion (from whichever thread finishes the work).
    @inlinable
    func startInline(
        _ admitted: Admitted<Effect, Event>,
        _ start: @Sendable (Effect, Send<Event>, @escaping EffectRouter<Effect, Event>.Completion) -> Void,
        on host: Host?
    ) {
        // A loop with no host left has ended: the effect is cancelled, as a job would be.
        guard host ?? adoptedHost() != nil else { return ended(admitted, .cancelled) }
        let begun = context.sink == nil ? nil : ContinuousClock.now
        let once = FirstCall()
        start(admitted.effect, effectSend) { result in
            // Called once by contract; a second call is ignored rather than counted as a second end.
            guard once.isFirst() else { return }
            switch result {
            case .success: self.ended(admitted, .completed, since: begun)
            case .failure(let error): self.ended(admitted, .failed(error), since: begun)
            }
        }
    }

    /// Runs one asynchronous effect in its task, then accounts for it.
    @inlinable
    func perform(_ admitted: Admitted<Effect, Event>) async {
        guard admitted.isControlled else {
            // Only a stop can cancel an uncontrolled effect, and a stopped loop ignores its end.
            guard !Task.isCancelled else { return ended(admitted, .cancelled) }
            let send = effectSend
            let start = context.sink == nil ? nil : ContinuousClock.now
            let outcome = await Self.outcome { try await admitted.perform(admitted.effect, send) }
            return ended(admitted, outcome, since: start)
        }
        await performControlled(admitted)
    }

    /// Starts the effect the engine let in once another ended (its key's queue, a throttle's interval):
    /// outside any drain, so what ends synchronously (nothing, for an asynchronous effect) is counted here.
    @inlinable
    func dispatchAlone(_ next: Dispatch<Effect, Event>) {
        var tally = SyncTally()
        dispatch(next, send: effectSend, tally: &tally)
        if !tally.isEmpty { engine.withLock { $0.count(tally) } }
    }

    /// Ends the throttle interval of `key` after `interval` on the loop's clock: the effect that waited for
    /// it, if any, starts then. Not waited for by a stop: the host cancels it when it ends.
    @inlinable
    func endInterval(of key: EffectKey, after interval: Duration, on host: Host?) {
        guard let host = host ?? adoptedHost() else { return }
        let clock = context.clock
        host.spawn(
            Host.Job(
                run: {
                    do { try await clock.sleep(for: interval) } catch { return }
                    guard let next = self.engine.withLock({ $0.intervalEnded(key) }) else { return }
                    self.dispatchAlone(next)
                },
                cancel: {}
            )
        )
    }

    /// Waits for a delayed effect's delay on the loop's clock; `false` if it was cancelled meanwhile (by
    /// its key, a graceful stop, or the loop's end).
    @inlinable
    func waitForDelay(of admitted: Admitted<Effect, Event>) async -> Bool {
        guard let delay = admitted.lifecycle.delay else { return true }
        let clock = context.clock
        let run = EffectRun()
        let id = admitted.id
        // Armed before the wait begins, so an effect cancelled first never starts sleeping on the clock.
        guard engine.withLock({ $0.arm(id, cancel: CancelHandle(id: id) { run.cancel() }) }) else { return false }
        let sleeper = Task {
            do {
                try await clock.sleep(for: delay)
                run.resolve(.completed)
            } catch {
                run.resolve(.cancelled)
            }
        }
        run.attach(sleeper)
        let outcome = await withTaskCancellationHandler {
            await run.outcome()
        } onCancel: {
            run.cancel()
        }
        if case .completed = outcome { return true }
        return false
    }

    /// Runs an effect that may be cancelled on its own or time out. Its handler runs in a task of its own,
    /// so the loop can cancel it, and stop waiting for it at its timeout, whether or not it cooperates.
    @inlinable
    func performControlled(_ admitted: Admitted<Effect, Event>) async {
        let id = admitted.id
        guard await waitForDelay(of: admitted) else { return ended(admitted, .cancelled) }
        let run = EffectRun()
        guard engine.withLock({ $0.begin(id, cancel: CancelHandle(id: id) { run.cancel() }) }) else {
            return ended(admitted, .cancelled)
        }
        observe(.effectStarted(admitted.effect, id: EffectID(rawValue: id), lifecycle: admitted.lifecycle))
        let start = context.sink == nil ? nil : ContinuousClock.now
        let timeout = admitted.lifecycle.timeout
        // A timed effect's events are taken only while it has not timed out.
        let send = timeout == nil ? effectSend : Send { event in self.receive(event, fromEffect: id) }
        let engine = self.engine
        let work = Task {
            let outcome = await Self.outcome { try await admitted.perform(admitted.effect, send) }
            if !run.handlerReturned(outcome) {
                // It had timed out: its handler has now returned, so it no longer runs unaccounted.
                engine.withLock { $0.stragglerReturned(id) }
            }
        }
        run.attach(work)
        var timer: Task<Void, Never>?
        if let timeout {
            let clock = context.clock
            timer = Task {
                do { try await clock.sleep(for: timeout) } catch { return }
                run.resolve(.timedOut(timeout))
            }
        }
        let outcome = await withTaskCancellationHandler {
            await run.outcome()
        } onCancel: {
            run.cancel()
        }
        if let timer {
            timer.cancel()
            await timer.value
        }
        if case .timedOut(let timeout) = outcome {
            timedOut(id, after: timeout, run)
        } else {
            // The handler has returned: let its task finish too, so nothing of the effect outlives it.
            await work.value
            ended(admitted, outcome, since: start)
        }
    }

    @inlinable
    func receive(_ event: Event, fromEffect id: UInt64) -> Delivery {
        let carried = context.carriedContext()
        return conclude(engine.withLock { $0.receive(event, fromEffect: id, context: carried) }, event)
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

    /// Effect `id`'s handler returned with `result`.
    @inlinable
    func ended(
        _ admitted: Admitted<Effect, Event>,
        _ result: EffectOutcome,
        since start: ContinuousClock.Instant? = nil
    ) {
        guard let end = engine.withLock({ $0.end(admitted, result) }) else { return }
        carryOut(end, duration: start.map { ContinuousClock.now - $0 } ?? .zero)
    }

    /// Effect `id` ran past `timeout`: it is reported timed out now; its handler is cancelled.
    @inlinable
    func timedOut(_ id: UInt64, after timeout: Duration, _ run: EffectRun) {
        let timing = engine.withLock { engine in
            engine.timeOut(id, after: timeout, handlerRunning: run.isHandlerRunning)
        }
        guard let (end, cancel) = timing else { return }
        cancel?.cancel()
        carryOut(end, duration: timeout)
    }

    /// Reports an effect's end, delivers the event its error maps to, starts the effect queued behind it,
    /// and finishes the loop's shutdown if that was the last thing it waited for.
    @inlinable
    func carryOut(_ end: LoopEngine<State, Event, Effect>.EffectEnd, duration: Duration) {
        let id = EffectID(rawValue: end.id)
        switch end.outcome {
        case .completed:
            observe(.effectCompleted(end.effect, id: id, duration: duration))
        case .failed(let error):
            observe(.effectFailed(end.effect, id: id, error: error, mappedTo: end.mapped, duration: duration))
        case .cancelled:
            observe(.effectCancelled(end.effect, id: id))
        case .timedOut(let timeout):
            observe(.effectTimedOut(end.effect, id: id, timeout: timeout, mappedTo: end.mapped))
        }
        if let mapped = end.mapped {
            let (reception, finish) = engine.withLock { $0.receiveMapped(mapped) }
            _ = conclude(reception, mapped)
            if let finish { carryOut(finish) }
        }
        if let next = end.next { dispatchAlone(next) }
        if let finish = end.finish { carryOut(finish) }
    }
}

/// One controlled effect's run: the task its handler runs in, and its outcome, which the handler's
/// return or the timeout decides, whichever comes first. The driver of an ``EffectRunMachine``.
@usableFromInline
final class EffectRun: Sendable {
    private let machine = Locked(EffectRunMachine<Task<Void, Never>, CheckedContinuation<EffectOutcome, Never>>())

    @usableFromInline
    init() {}

    /// Cancels the handler's task, now or as soon as it is attached.
    @usableFromInline
    func cancel() {
        machine.withLock { $0.cancel() }?.cancel()
    }

    /// The handler's task.
    @usableFromInline
    func attach(_ task: Task<Void, Never>) {
        if machine.withLock({ $0.attach(task) }) { task.cancel() }
    }

    /// Decides the outcome; `false` if it had already been decided.
    @usableFromInline
    @discardableResult
    func resolve(_ outcome: EffectOutcome) -> Bool {
        let (decided, waiter) = machine.withLock { $0.resolve(outcome) }
        waiter?.resume(returning: outcome)
        return decided
    }

    /// The handler returned with `outcome`; `false` if the outcome had already been decided (timed out).
    @usableFromInline
    func handlerReturned(_ outcome: EffectOutcome) -> Bool {
        let (decided, waiter) = machine.withLock { $0.handlerReturned(outcome) }
        waiter?.resume(returning: outcome)
        return decided
    }

    /// Whether the handler has not returned yet.
    @usableFromInline
    var isHandlerRunning: Bool {
        machine.withLock { !$0.returned }
    }

    /// The outcome, once decided.
    @usableFromInline
    func outcome() async -> EffectOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<EffectOutcome, Never>) in
            if let decided = machine.withLock({ $0.awaitOutcome(continuation) }) {
                continuation.resume(returning: decided)
            }
        }
    }
}
