public import EffectHandlers
public import EventSources

/// Where a loop's activities go: the observer of a standalone loop, or the group's observer with the
/// entity each loop belongs to. A standalone loop's observer that reads the state gets a way to.
///
/// A class, so a loop's context holds one reference instead of two closures: 32 bytes less per loop,
/// and a loop without an observer holds none (benchmark w3s).
@usableFromInline
final class ActivitySink<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// Delivers an activity of the loop for an entity (`nil` for a standalone loop), with a way to read
    /// that loop's state.
    @usableFromInline
    let deliver: @Sendable (LoopActivity<Event, Effect>, (any Sendable)?, () -> State) -> Void
    /// Delivers an activity of a group as a whole, or of an entity that has no loop.
    @usableFromInline
    let deliverWithoutState: @Sendable (LoopActivity<Event, Effect>, (any Sendable)?) -> Void

    @usableFromInline
    init(
        deliver: @escaping @Sendable (LoopActivity<Event, Effect>, (any Sendable)?, () -> State) -> Void,
        deliverWithoutState: @escaping @Sendable (LoopActivity<Event, Effect>, (any Sendable)?) -> Void
    ) {
        self.deliver = deliver
        self.deliverWithoutState = deliverWithoutState
    }

    /// The sink for a standalone loop's `observer`: one that reads the state gets to.
    @usableFromInline
    static func observer(_ observer: any LoopObserver<Event, Effect>) -> ActivitySink {
        let plain: @Sendable (LoopActivity<Event, Effect>, (any Sendable)?) -> Void = { activity, _ in
            observer.observe(activity)
        }
        if let reading = observer as? any LoopStateObserver<State, Event, Effect> {
            return ActivitySink(
                deliver: { activity, _, state in reading.observe(activity, state: state) },
                deliverWithoutState: plain
            )
        }
        return ActivitySink(deliver: { activity, _, _ in observer.observe(activity) }, deliverWithoutState: plain)
    }

    /// The sink for a group's `observer`, which gets each activity with its entity.
    @usableFromInline
    static func group<ID: Hashable & Sendable>(_ observer: any LoopGroupObserver<ID, Event, Effect>) -> ActivitySink {
        ActivitySink(
            deliver: { activity, entity, _ in observer.observe(activity, of: entity as? ID) },
            deliverWithoutState: { activity, entity in observer.observe(activity, of: entity as? ID) }
        )
    }
}

/// What every loop of one kind shares: how effects are performed, the sources, the observer and the
/// clock. One instance serves a standalone loop, or every loop of a ``LoopGroup``, so a per-entity
/// loop carries a single reference to it.
@usableFromInline
final class LoopContext<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    let router: EffectRouter<Effect, Event>
    /// The router's routes, lifecycles, stop request and scope, kept apart from it for the paths that
    /// read them for each effect (the engine's decisions, the inline path): reached through `router`,
    /// each read copied the whole router, a retain and a release of each of its closures.
    @usableFromInline
    let routes: [EffectRouter<Effect, Event>.Route]
    @usableFromInline
    let lifecycleOf: @Sendable (Effect) -> EffectLifecycle
    @usableFromInline
    let stopOn: (@Sendable (Effect) -> Duration?)?
    @usableFromInline
    let scope: EffectScope<Effect>?
    @usableFromInline
    let sources: [any EventSource<Event>]
    @usableFromInline
    let sink: ActivitySink<State, Event, Effect>?
    @usableFromInline
    let clock: any Clock<Duration>
    @usableFromInline
    let inbox: InboxPolicy
    /// Whether the router's scope is told of each processed event (read per event: a flag, not a copy
    /// of the scope).
    @usableFromInline
    let scopeSeesEvents: Bool
    /// Whether to time each update (an observer, or a scope told of each event, needs the duration).
    @usableFromInline
    let timed: Bool
    /// Whether the effect table keeps every effect (an observer reports each one's end).
    @usableFromInline
    let tracksEffects: Bool

    /// What the router's scope captures for an event sent now (`nil` without a scope). Called outside
    /// every lock: `capture` is the app's code.
    @inlinable
    func carriedContext() -> CarriedContext? {
        scope?.captured()
    }

    @usableFromInline
    init(
        router: EffectRouter<Effect, Event>,
        sources: [any EventSource<Event>],
        sink: ActivitySink<State, Event, Effect>?,
        clock: any Clock<Duration>,
        inbox: InboxPolicy
    ) {
        self.router = router
        (routes, lifecycleOf, stopOn, scope) = (router.table, router.lifecycles, router.stopOn, router.scope)
        self.sources = sources
        self.sink = sink
        self.clock = clock
        self.inbox = inbox
        let scopeSeesEvents = router.scope?.seesEvents == true
        self.scopeSeesEvents = scopeSeesEvents
        // A scope told of each event needs its update's duration too, as an observer does.
        self.timed = sink != nil || scopeSeesEvents
        self.tracksEffects = sink != nil
    }

    /// A context with no sources and no observer whose engine times updates and tracks effects as told,
    /// for an engine's tests.
    init(router: EffectRouter<Effect, Event>, policy: InboxPolicy, timed: Bool, tracksEffects: Bool) {
        self.router = router
        (routes, lifecycleOf, stopOn, scope) = (router.table, router.lifecycles, router.stopOn, router.scope)
        self.sources = []
        self.sink = nil
        self.clock = ContinuousClock()
        self.inbox = policy
        self.scopeSeesEvents = router.scope?.seesEvents == true
        self.timed = timed
        self.tracksEffects = tracksEffects
    }

    /// Reports `activity` of the loop for `entity` (`nil` for a standalone loop); `state` reads that
    /// loop's state, if the observer asks.
    @inlinable
    func observe(
        _ activity: @autoclosure () -> LoopActivity<Event, Effect>,
        entity: (any Sendable)?,
        state: () -> State
    ) {
        sink?.deliver(activity(), entity, state)
    }

    /// Reports `activity` of a group as a whole (`entity` `nil`), or of an entity that has no loop.
    @inlinable
    func observeGroup(_ activity: @autoclosure () -> LoopActivity<Event, Effect>, entity: (any Sendable)?) {
        sink?.deliverWithoutState(activity(), entity)
    }
}
