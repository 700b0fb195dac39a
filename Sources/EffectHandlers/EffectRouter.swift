public import LoopCore

/// Sends each effect to the handler of its case, so a program's effect handling reads as one table.
///
/// ```swift
/// let router = EffectRouter<Effect, Event>()
///     .route({ if case .run(let job) = $0 { job } else { nil } }, to: JobRunner(shell: shell))
///     .route({ if case .log(let line) = $0 { line } else { nil } }, to: LineLogger())
///     .mapErrors { effect, error in .effectFailed("\(effect)", "\(error)") }
/// ```
///
/// Routes are tried in the order they were added; the first whose extraction returns a value handles
/// the effect. An effect no route accepts is not lost: it is reported as ``EffectError/unrouted``. When
/// `Effect` conforms to ``ManagedEffect``, the router schedules each effect by its lifecycle.
///
/// The extraction closures, an effect's lifecycle and the error mapping are called while the loop
/// holds its lock, as the update is: like the update, they must be quick and pure, and must not call
/// into the loop (its `send`, `state` or `stop`). Handlers are called after the lock is released.
public struct EffectRouter<Effect: Sendable, Event: Sendable>: Sendable {
    /// How one effect is performed, as chosen by its route. The closures are stored in the route, so
    /// choosing one allocates nothing; call them with the effect.
    @usableFromInline
    package enum Performer: Sendable {
        /// Performed inline right after the update, without a task.
        case sync(@Sendable (Effect, Send<Event>) throws -> Void)
        /// Performed in a task of its own.
        case async(@Sendable (Effect, Send<Event>) async throws -> Void)
        /// Started inline right after the update, without a task, and finished later: the closure begins
        /// the work and calls its completion once, from any thread, when the effect is done. The loop
        /// counts it running until then (a graceful stop waits for it). Started in a task, awaiting the
        /// completion, when its lifecycle lets the loop cancel it or time it out.
        case completing(@Sendable (Effect, Send<Event>, @escaping Completion) -> Void)
    }

    /// How a ``Performer/completing(_:)`` effect says it is done.
    @usableFromInline
    package typealias Completion = @Sendable (Result<Void, any Error>) -> Void

    /// One row of the table: which effects it takes, and how it performs them.
    @usableFromInline
    package struct Route: Sendable {
        @usableFromInline
        let accepts: @Sendable (Effect) -> Bool
        @usableFromInline
        let performer: Performer

        @inlinable
        init(accepts: @escaping @Sendable (Effect) -> Bool, performer: Performer) {
            self.accepts = accepts
            self.performer = performer
        }
    }

    @usableFromInline
    var routes: [Route] = []
    /// Whether some route performs effects asynchronously. A loop whose router has none needs no decision
    /// about any effect's lifecycle (only asynchronous effects have one), so it skips that work.
    @usableFromInline
    package internal(set) var hasAsyncRoutes = false
    @usableFromInline
    var errorMapping: (@Sendable (Effect, any Error) -> Event?)?
    @usableFromInline
    let lifecycleOf: @Sendable (Effect) -> EffectLifecycle
    /// The grace period an effect asks its loop to stop with, for an effect that does.
    @usableFromInline
    package internal(set) var stopOn: (@Sendable (Effect) -> Duration?)?
    /// The code run around every handler, with the context carried from the send (see ``scoped(_:)``).
    @usableFromInline
    package internal(set) var scope: EffectScope<Effect>?

    /// Creates an empty router; every effect it routes runs ``EffectLifecycle/concurrent(_:timeout:)``.
    @inlinable
    public init() {
        lifecycleOf = { _ in .concurrent() }
    }

    @inlinable
    init(lifecycleOf: @escaping @Sendable (Effect) -> EffectLifecycle) {
        self.lifecycleOf = lifecycleOf
    }

    /// Creates an empty router that schedules each effect by its ``ManagedEffect/lifecycle``.
    @inlinable
    public init() where Effect: ManagedEffect {
        lifecycleOf = { $0.lifecycle }
    }

    /// Adds a route: effects for which `extract` returns a payload are performed by `handler`, in a task.
    @inlinable
    public func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some EffectHandler<Payload, Event>
    ) -> EffectRouter {
        adding(
            extract,
            .async { effect, send in
                guard let payload = extract(effect) else { return }
                try await handler.handle(payload, send: send)
            }
        )
    }

    /// Adds a route: effects for which `extract` returns a payload are performed by `handler`, inline.
    @inlinable
    public func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some SyncEffectHandler<Payload, Event>
    ) -> EffectRouter {
        adding(
            extract,
            .sync { effect, send in
                guard let payload = extract(effect) else { return }
                try handler.handle(payload, send: send)
            }
        )
    }

    /// ``route(_:to:)`` with `handler`, or, when `completing` is given, ``route(_:completing:)`` with it:
    /// for a wrapper that starts work inline only where its service can complete it.
    @inlinable
    package func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some EffectHandler<Payload, Event>,
        completing start: (@Sendable (Payload, Send<Event>, @escaping Completion) -> Void)?
    ) -> EffectRouter {
        guard let start else { return route(extract, to: handler) }
        return route(extract, completing: start)
    }

    /// Adds a route: effects for which `extract` returns a payload are started by `start`, inline, and
    /// end when `start` calls its completion (see ``Performer/completing(_:)``): work that waits
    /// elsewhere (a store's writer thread) without holding a task while it waits.
    @inlinable
    package func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        completing start: @escaping @Sendable (Payload, Send<Event>, @escaping Completion) -> Void
    ) -> EffectRouter {
        adding(
            extract,
            .completing { effect, send, done in
                guard let payload = extract(effect) else { return done(.success(())) }
                start(payload, send, done)
            }
        )
    }

    /// The same router with a route for the effects `extract` takes, performed by `performer`.
    @inlinable
    func adding<Payload>(_ extract: @escaping @Sendable (Effect) -> Payload?, _ performer: Performer) -> EffectRouter {
        var copy = self
        if case .sync = performer {} else { copy.hasAsyncRoutes = true }
        copy.routes.append(Route(accepts: { extract($0) != nil }, performer: performer))
        return copy
    }

    /// Turns errors of effects (thrown by a handler, a timeout, or no route) into events for the update.
    ///
    /// Return `nil` for an error the program does not handle; it then goes to the loop's observer.
    @inlinable
    public func mapErrors(_ transform: @escaping @Sendable (Effect, any Error) -> Event?) -> EffectRouter {
        var copy = self
        copy.errorMapping = transform
        return copy
    }

    /// The same router with a synchronous route tried before every other one.
    @inlinable
    package func routeFirst<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some SyncEffectHandler<Payload, Event>
    ) -> EffectRouter {
        var copy = route(extract, to: handler)
        copy.routes.insert(copy.routes.removeLast(), at: 0)
        return copy
    }

    /// Makes the effects `extract` recognises stop the loop that performs them: gracefully, within the
    /// grace period `extract` returns (see the loop's `stop(gracePeriod:)`). A loop of a group leaves it
    /// at once, as the group's `remove(_:)` does: its id is free for a new loop, and it finishes its
    /// effects within the group's own shutdown (the grace period `extract` returns does not apply).
    ///
    /// The program decides when to stop, as a value a test asserts; no handler needs the loop. Calling
    /// it again adds to what stops the loop (the latest call is asked first).
    ///
    /// ```swift
    /// router.stopLoop(on: { if case .shutDown(let grace) = $0 { grace } else { nil } })
    /// ```
    @inlinable
    public func stopLoop(on extract: @escaping @Sendable (Effect) -> Duration?) -> EffectRouter {
        var copy = self
        if let earlier = stopOn {
            copy.stopOn = { effect in extract(effect) ?? earlier(effect) }
        } else {
            copy.stopOn = extract
        }
        return copy
    }

    /// The same routes, with `hook` called whenever an effect asks the loop to stop (before the stop
    /// is made); effects that do not stop the loop meet the same one check as before.
    ///
    /// Wraps what ``stopLoop(on:)`` composed in place, so the check is not run twice.
    @inlinable
    package func whenStopAsked(_ hook: @escaping @Sendable () -> Void) -> EffectRouter {
        guard let stops = stopOn else { return self }
        var copy = self
        copy.stopOn = { effect in
            guard let grace = stops(effect) else { return nil }
            hook()
            return grace
        }
        return copy
    }

    /// The same routes for a loop whose event type is `Outer`: every event a handler sends, and every
    /// event the error mapping makes, is turned into an `Outer` by `embed`.
    ///
    /// How a child feature's routes serve its parent's loop, and how a `LoopStore` (`LoopRuntime`) gives
    /// handlers a sender of feedback only.
    @inlinable
    public func mapEvents<Outer: Sendable>(_ embed: @escaping @Sendable (Event) -> Outer) -> EffectRouter<Effect, Outer>
    {
        mapEvents(embed, errors: embed)
    }

    /// ``mapEvents(_:)``, with the events the error mapping makes turned into `Outer` by `embedError`
    /// (called where the loop decides, possibly under its lock: it must not run the app's code).
    @inlinable
    package func mapEvents<Outer: Sendable>(
        _ embed: @escaping @Sendable (Event) -> Outer,
        errors embedError: @escaping @Sendable (Event) -> Outer
    ) -> EffectRouter<Effect, Outer> {
        var outer = EffectRouter<Effect, Outer>(lifecycleOf: lifecycleOf)
        outer.hasAsyncRoutes = hasAsyncRoutes
        outer.stopOn = stopOn
        outer.scope = scope
        outer.routes = routes.map { route in
            switch route.performer {
            case .sync(let perform):
                EffectRouter<Effect, Outer>.Route(
                    accepts: route.accepts,
                    performer: .sync { effect, send in try perform(effect, send.map(embed)) }
                )
            case .async(let perform):
                EffectRouter<Effect, Outer>.Route(
                    accepts: route.accepts,
                    performer: .async { effect, send in try await perform(effect, send.map(embed)) }
                )
            case .completing(let start):
                EffectRouter<Effect, Outer>.Route(
                    accepts: route.accepts,
                    performer: .completing { effect, send, done in start(effect, send.map(embed), done) }
                )
            }
        }
        if let errorMapping {
            outer.errorMapping = { effect, error in errorMapping(effect, error).map(embedError) }
        }
        return outer
    }

    /// The same routes for a loop whose effects are `Outer`: an outer effect `extract` turns into one of
    /// these effects is performed by its route, with its lifecycle, error mapping and what stops the loop; any
    /// other outer effect is left to routes added afterwards (``EffectLifecycle/concurrent(_:timeout:)``
    /// unless they say otherwise through a later ``stopLoop(on:)``).
    ///
    /// How a wrapper (a durable loop, a parent feature) keeps a child's routes as they are while adding
    /// its own effects around them.
    ///
    /// ```swift
    /// let outer = router.pullback { (effect: Outer) in if case .child(let inner) = effect { inner } else { nil } }
    ///     .route({ if case .audit(let line) = $0 { line } else { nil } }, to: AuditLog())
    /// ```
    @inlinable
    public func pullback<Outer: Sendable>(
        _ extract: @escaping @Sendable (Outer) -> Effect?
    ) -> EffectRouter<Outer, Event> {
        pullback(extract, key: nil)
    }

    /// ``pullback(_:)``, with each effect performed under the ``IdempotencyKey`` `key` gives its outer
    /// effect (``IdempotencyKey/current`` while its handler runs), and inside the scope with the context
    /// `context` finds in the outer effect, if any; and scheduled by the lifecycle `lifecycle` gives an
    /// outer effect, if it gives one, in place of its inner effect's: how a durable loop keys its effects,
    /// hands each the context of its own event, and starts a timer's effect once its wait is over.
    @inlinable
    package func pullback<Outer: Sendable>(
        _ extract: @escaping @Sendable (Outer) -> Effect?,
        key: (@Sendable (Outer) -> IdempotencyKey?)?,
        context: (@Sendable (Outer) -> CarriedContext??)? = nil,
        lifecycle: (@Sendable (Outer) -> EffectLifecycle?)? = nil
    ) -> EffectRouter<Outer, Event> {
        let lifecycleOf = self.lifecycleOf
        let inner: @Sendable (Outer) -> EffectLifecycle = { extract($0).map(lifecycleOf) ?? .concurrent() }
        var outer = EffectRouter<Outer, Event>(lifecycleOf: inner)
        if let lifecycle { outer = EffectRouter<Outer, Event>(lifecycleOf: { lifecycle($0) ?? inner($0) }) }
        outer.hasAsyncRoutes = hasAsyncRoutes
        outer.routes = routes.map { route in
            let accepts = route.accepts
            switch route.performer {
            case .sync(let perform):
                return EffectRouter<Outer, Event>.Route(
                    accepts: { extract($0).map(accepts) ?? false },
                    performer: .sync { effect, send in
                        guard let inner = extract(effect) else { return }
                        guard let key, let value = key(effect) else { return try perform(inner, send) }
                        try IdempotencyKey.$current.withValue(value) { try perform(inner, send) }
                    }
                )
            case .async(let perform):
                return EffectRouter<Outer, Event>.Route(
                    accepts: { extract($0).map(accepts) ?? false },
                    performer: .async { effect, send in
                        guard let inner = extract(effect) else { return }
                        guard let key, let value = key(effect) else { return try await perform(inner, send) }
                        try await IdempotencyKey.$current.withValue(value) { try await perform(inner, send) }
                    }
                )
            case .completing(let start):
                return EffectRouter<Outer, Event>.Route(
                    accepts: { extract($0).map(accepts) ?? false },
                    performer: .completing { effect, send, done in
                        guard let inner = extract(effect) else { return done(.success(())) }
                        guard let key, let value = key(effect) else { return start(inner, send, done) }
                        // The key is current while the work starts; what runs later is the starter's to key.
                        IdempotencyKey.$current.withValue(value) { start(inner, send, done) }
                    }
                )
            }
        }
        if let errorMapping {
            outer.errorMapping = { effect, error in extract(effect).flatMap { errorMapping($0, error) } }
        }
        if let stopOn {
            outer.stopOn = { effect in extract(effect).flatMap(stopOn) }
        }
        outer.scope = scope?.lifted(extract, context: context)
        return outer
    }

    /// This router, with the events its error mapping makes changed by `transform`, given the effect that
    /// failed: how a durable loop gives such an event the failed effect's context.
    @inlinable
    package func mappingErrorEvents(_ transform: @escaping @Sendable (Effect, Event) -> Event) -> EffectRouter {
        guard let errorMapping else { return self }
        var router = self
        router.errorMapping = { effect, error in errorMapping(effect, error).map { transform(effect, $0) } }
        return router
    }

    /// This router, with its scope as a wrapper's loop needs it (see ``EffectScope/forWrapper(events:)``):
    /// how a durable loop, which keeps each event's context in the event, shows the scope its program's
    /// events only.
    @inlinable
    package func scopeForWrapper(
        events extract: @escaping @Sendable (any Sendable) -> (event: any Sendable, context: CarriedContext?)?
    ) -> EffectRouter {
        var router = self
        router.scope = scope?.forWrapper(events: extract)
        return router
    }

    /// This router, with every effect's handler run inside `scope`, which receives the context the
    /// scope captured where the effect's event was sent (see ``EffectScope``).
    ///
    /// The scope carries over to routers made from this one (``mapEvents(_:)``, ``pullback(_:)``,
    /// ``combined(with:)``: there the first router's scope, or the other's if it has none, wraps every
    /// route), and so to the durable loops built on it; the context is never recorded.
    @inlinable
    public func scoped(_ scope: EffectScope<Effect>) -> EffectRouter {
        var scoped = self
        scoped.scope = scope
        return scoped
    }

    /// This router's routes, then `other`'s: an effect goes to the first route that takes it, with the
    /// lifecycle, error mapping and what stops the loop, of the router whose route that is.
    ///
    /// How a parent puts its features' routers, and its own, into one table.
    @inlinable
    public func combined(with other: EffectRouter) -> EffectRouter {
        let mine = self
        var combined = EffectRouter(lifecycleOf: { effect in
            mine.performer(for: effect) != nil ? mine.lifecycleOf(effect) : other.lifecycleOf(effect)
        })
        combined.routes = routes + other.routes
        combined.hasAsyncRoutes = hasAsyncRoutes || other.hasAsyncRoutes
        if errorMapping != nil || other.errorMapping != nil {
            combined.errorMapping = { effect, error in
                mine.performer(for: effect) != nil
                    ? mine.errorMapping?(effect, error) : other.errorMapping?(effect, error)
            }
        }
        if stopOn != nil || other.stopOn != nil {
            combined.stopOn = { effect in mine.stopOn?(effect) ?? other.stopOn?(effect) }
        }
        combined.scope = scope ?? other.scope
        return combined
    }

    /// This router with a child's routes added: the child's effects are found in this router's by
    /// `effect`, and the events its handlers send are lifted by `event`.
    ///
    /// ```swift
    /// let router = EffectRouter<AppEffect, AppEvent>()
    ///     .route({ if case .log(let line) = $0 { line } else { nil } }, to: Logger())
    ///     .embedding(Checkout.router, effect: { if case .checkout(let e) = $0 { e } else { nil } }, event: AppEvent.checkout)
    /// ```
    @inlinable
    public func embedding<ChildEffect: Sendable, ChildEvent: Sendable>(
        _ child: EffectRouter<ChildEffect, ChildEvent>,
        effect: @escaping @Sendable (Effect) -> ChildEffect?,
        event: @escaping @Sendable (ChildEvent) -> Event
    ) -> EffectRouter {
        combined(with: child.mapEvents(event).pullback(effect))
    }

    /// The performer the first matching route chooses for `effect`, or `nil` when no route accepts it.
    @inlinable
    package func performer(for effect: Effect) -> Performer? {
        Self.performer(in: routes, for: effect)
    }

    /// The performer the first of `routes` that accepts `effect` chooses: ``performer(for:)`` for a
    /// caller that keeps a router's ``table`` apart from it (to ask a router stored in a class, Swift
    /// copies it whole, a retain and a release of each of its closures).
    @inlinable
    package static func performer(in routes: [Route], for effect: Effect) -> Performer? {
        // By index, so each route is read in place rather than copied (two closure retains per route).
        for index in routes.indices where routes[index].accepts(effect) {
            return routes[index].performer
        }
        return nil
    }

    /// The routes, in order (see ``performer(in:for:)``).
    @inlinable
    package var table: [Route] { routes }

    /// How each effect is scheduled (``lifecycle(of:)`` for a caller that keeps it apart from the router).
    @inlinable
    package var lifecycles: @Sendable (Effect) -> EffectLifecycle { lifecycleOf }

    /// How `effect` is scheduled.
    @inlinable
    package func lifecycle(of effect: Effect) -> EffectLifecycle {
        lifecycleOf(effect)
    }

    /// The event the program maps `error` of `effect` to, if it maps it.
    @inlinable
    package func event(for error: any Error, of effect: Effect) -> Event? {
        errorMapping?(effect, error)
    }
}
