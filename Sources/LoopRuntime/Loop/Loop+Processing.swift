public import EffectHandlers
public import LoopCore

extension Loop {
    /// For the drain baton's holder: takes `first`, then every step the engine hands out, until the
    /// drain ends.
    @inlinable
    func drain(from first: consuming Step<State, Event, Effect>?, counted: SyncTally = SyncTally()) {
        var send: Send<Event>?
        var tally = counted
        var step = first
        while true {
            // Moved out, not copied: a copy retains and releases everything the step holds.
            if let current = step.take() {
                if let duration = current.duration {
                    if context.scopeSeesEvents {
                        context.scope?.processed(current.event, context: current.context, update: duration)
                    }
                    observe(
                        .eventProcessed(
                            current.event,
                            origin: current.origin,
                            duration: duration,
                            inboxDepth: current.inboxDepth,
                            effects: current.dispatch.effects,
                            firstEffect: EffectID(rawValue: current.dispatch.firstID)
                        )
                    )
                }
                current.wakeups?.resume()
                if !current.dispatch.isEmpty {
                    let sender = send ?? effectSend
                    send = sender
                    dispatch(current.dispatch, send: sender, context: current.context, tally: &tally)
                }
            }
            let counted = tally
            tally = SyncTally()
            switch engine.withLock({ $0.nextStep(counting: counted) }) {
            case .step(let following):
                step = following
            case .again:
                step = nil
            case .idle:
                return
            case .idleWaking(let waiters):
                for waiter in waiters { waiter.resume() }
                return
            case .finished(let finish):
                carryOut(finish)
                return
            }
        }
    }

    /// Starts the effects of one event in order: each follows the engine's decision for it, or, with
    /// none, runs inline (synchronous) or is reported failed (unrouted).
    @inlinable
    func dispatch(
        _ dispatch: Dispatch<Effect, Event>,
        send: Send<Event>,
        context carried: CarriedContext? = nil,
        tally: inout SyncTally
    ) {
        // Most events decide nothing (synchronous effects only): no decision list to walk.
        var id = dispatch.firstID
        guard let decided = dispatch.decided else {
            for effect in dispatch.effects {
                performUndecided(effect, id: id, send: send, context: carried, tally: &tally)
                id &+= 1
            }
            return
        }
        var next = 0
        for (index, effect) in dispatch.effects.enumerated() {
            if next < decided.list.count, decided.list[next].index == index {
                apply(decided.list[next].admission, to: effect, id: id, on: decided.host)
                next += 1
            } else {
                performUndecided(effect, id: id, send: send, context: carried, tally: &tally)
            }
            id &+= 1
        }
    }

    /// Performs an effect the engine took no decision for: it stops the loop, runs inline, or is
    /// reported failed (unrouted).
    @inlinable
    func performUndecided(
        _ effect: Effect,
        id: UInt64,
        send: Send<Event>,
        context carried: CarriedContext? = nil,
        tally: inout SyncTally
    ) {
        if let stopOn = context.stopOn, let gracePeriod = stopOn(effect) {
            // Counted before the stop, with what the step counted so far: a stop with no grace period
            // may end the loop before this step's holder next reaches the engine.
            tally.count(completed: true)
            let counted = tally
            tally = SyncTally()
            engine.withLock { $0.count(counted) }
            return stopItself(gracePeriod: gracePeriod, asked: effect, id: id)
        }
        switch EffectRouter.performer(in: context.routes, for: effect) {
        case .sync(let perform):
            if let scope = context.scope {
                // The event a failure maps to is sent with the effect's context too.
                scope.carrying(carried) {
                    performSync(
                        effect,
                        id: id,
                        { effect, send in try scope.run(carried, effect) { try perform(effect, send) } },
                        send: send,
                        tally: &tally
                    )
                }
            } else {
                performSync(effect, id: id, perform, send: send, tally: &tally)
            }
        case nil where context.router.lifecycle(of: effect).policy == .cancel:
            // A `cancel` effect needs no route; with no asynchronous route there is nothing to cancel.
            break
        case .async, .completing, nil:
            // The engine decides every asynchronous effect, so `.async` is never reached here; were it,
            // the effect would be reported rather than lost, as an unrouted one is.
            tally.count(completed: false)
            reportFailure(of: effect, id: id, EffectError.unrouted, send: send)
        }
    }

    @inlinable
    func apply(_ admission: Admission<Effect, Event>, to effect: Effect, id: UInt64, on host: Host?) {
        switch admission {
        case .start(let admitted, let cancelling, let cancelled):
            for handle in cancelling { handle.cancel() }
            for queued in cancelled { observe(.effectCancelled(queued.effect, id: EffectID(rawValue: queued.id))) }
            spawn(admitted, on: host)
        case .queued:
            break
        case .dropped:
            observe(.effectDropped(effect, id: EffectID(rawValue: id)))
        case .cancel(let cancelling, let cancelled):
            for handle in cancelling { handle.cancel() }
            for queued in cancelled { observe(.effectCancelled(queued.effect, id: EffectID(rawValue: queued.id))) }
        case .throttled(let admitted, let interval):
            spawn(admitted, on: host)
            if let key = admitted.lifecycle.key { endInterval(of: key, after: interval, on: host) }
        case .held(let replaced):
            if let replaced { observe(.effectDropped(replaced.effect, id: EffectID(rawValue: replaced.id))) }
        }
    }

    @inlinable
    func performSync(
        _ effect: Effect,
        id: UInt64,
        _ perform: @Sendable (Effect, Send<Event>) throws -> Void,
        send: Send<Event>,
        tally: inout SyncTally
    ) {
        guard context.sink != nil else {
            do {
                try perform(effect, send)
                tally.count(completed: true)
            } catch {
                tally.count(completed: false)
                reportFailure(of: effect, id: id, error, send: send)
            }
            return
        }
        let effectID = EffectID(rawValue: id)
        observe(.effectStarted(effect, id: effectID, lifecycle: context.router.lifecycle(of: effect)))
        let start = ContinuousClock.now
        do {
            try perform(effect, send)
            tally.count(completed: true)
            observe(.effectCompleted(effect, id: effectID, duration: ContinuousClock.now - start))
        } catch {
            tally.count(completed: false)
            reportFailure(of: effect, id: id, error, send: send, duration: ContinuousClock.now - start)
        }
    }

    /// The program asked, with `effect`, to stop its loop within `gracePeriod` (the effect is counted
    /// completed by the caller, before the stop).
    @usableFromInline
    func stopItself(gracePeriod: Duration, asked effect: Effect, id: UInt64) {
        let effectID = EffectID(rawValue: id)
        if context.sink != nil {
            observe(.effectStarted(effect, id: effectID, lifecycle: context.router.lifecycle(of: effect)))
        }
        // A grouped loop (one with an entity) is stopped by its group, and not at all once the group is gone.
        if entity != nil {
            group?.loop(self, tells: .stopAsked)
        } else {
            stop(gracePeriod: gracePeriod)
        }
        observe(.effectCompleted(effect, id: effectID, duration: .zero))
    }

    /// Reports a failed synchronous effect and sends the event the program maps its error to, if any.
    @inlinable
    func reportFailure(
        of effect: Effect,
        id: UInt64,
        _ error: any Error,
        send: Send<Event>,
        duration: Duration = .zero
    ) {
        let mapped = context.router.event(for: error, of: effect)
        observe(.effectFailed(effect, id: EffectID(rawValue: id), error: error, mappedTo: mapped, duration: duration))
        if let mapped { send(mapped) }
    }

    /// Releases everyone waiting on a loop that has stopped, reports what the stop did, and leaves the
    /// host.
    @usableFromInline
    func carryOut(_ finish: Finish<State, Event, Effect>) {
        for subscriber in finish.subscribers { subscriber.resume(returning: nil) }
        for request in finish.requests { request.fail(.loopStopped) }
        for turned in finish.senders {
            observe(.eventRejected(turned.event, reason: .stopped))
            turned.sender.resume(returning: .rejected(.stopped))
        }
        for waiter in finish.startWaiters { waiter.resume(returning: false) }
        for waiter in finish.idleWaiters { waiter.resume() }
        for handle in finish.cancelling { handle.cancel() }
        for event in finish.dropped { observe(.eventDropped(event)) }
        for effect in finish.cancelled { observe(.effectCancelled(effect.effect, id: EffectID(rawValue: effect.id))) }
        for effect in finish.abandoned { observe(.effectAbandoned(effect.effect, id: EffectID(rawValue: effect.id))) }
        if context.sink != nil { observe(.stopped(report)) }
        group?.loop(self, tells: .stopped)
        finish.host?.leave()
    }
}
