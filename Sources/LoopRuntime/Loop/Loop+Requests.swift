public import EffectHandlers
public import LoopCore

extension Loop {
    /// Sends the event `make` builds around a new ``/LoopCore/ReplyTo`` and waits for the reply the
    /// update decides: how an HTTP or RPC handler asks the loop something.
    ///
    /// ```swift
    /// let price = try await loop.request(timeout: .seconds(2)) { .quote(item, replyTo: $0) }
    /// ```
    ///
    /// The update answers by returning an effect holding `replyTo.reply(value)`, performed by the
    /// router's ``/EffectHandlers/EffectRouter/replies(_:)`` route; it may answer at once, or keep
    /// `replyTo` in its state and answer later (after a payment effect sent its outcome back, say). Every wait
    /// ends, with the reply or with a ``RequestError``:
    /// - ``RequestError/rejected(_:)`` when the loop does not take the event (stopping, inbox full);
    /// - ``RequestError/loopStopped`` when the loop stops before replying;
    /// - ``RequestError/unanswered`` as soon as the loop let go of every copy of `replyTo` without
    ///   replying;
    /// - ``RequestError/timedOut(after:)`` when `timeout` (on the loop's clock) passes first;
    /// - ``RequestError/cancelled`` when the waiting task is cancelled.
    ///
    /// A reply that comes after the caller gave up is dropped. Sent as ``send(_:)`` sends: it never
    /// waits for room in a bounded inbox.
    @inlinable
    public func request<Value: Sendable>(
        timeout: Duration? = nil,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await Requests.ask(timeout: timeout, clock: context.clock, make: make) { event, waiter in
            receive(event, from: .outside, holding: waiter)
        }
    }

    /// Takes `event`, as ``send(_:)`` does, and holds `request` in the same hold of the lock if it is
    /// taken.
    @inlinable
    func receive(_ event: Event, from origin: EventOrigin, holding request: any PendingRequest) -> Delivery {
        let carried = context.carriedContext()
        let reception = engine.withLock { engine in
            let reception = engine.receive(event, from: origin, context: carried)
            if case .rejected = reception {} else { _ = engine.register(request) }
            return reception
        }
        return conclude(reception, event)
    }

    /// Keeps a request this loop took until it has its reply, so the loop's stop can fail it.
    @usableFromInline
    func hold(_ request: any PendingRequest) {
        // Answered already (processed inline, on this thread): nothing to hold.
        guard !request.isResolved else { return }
        if !engine.withLock({ $0.register(request) }) { request.fail(.loopStopped) }
    }
}
