public import EffectHandlers
public import EventSources

/// What every loop of one kind shares: how effects are performed, the sources, the observer and the
/// clock. One instance serves a standalone loop, or every loop of a ``LoopGroup``, so a per-entity
/// loop carries a single reference to it.
@usableFromInline
final class LoopContext<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    let router: EffectRouter<Effect, Event>
    @usableFromInline
    let sources: [any EventSource<Event>]
    @usableFromInline
    let observer: (any LoopObserver<Event, Effect>)?
    @usableFromInline
    let clock: any Clock<Duration>
    @usableFromInline
    let inbox: InboxPolicy

    @usableFromInline
    init(
        router: EffectRouter<Effect, Event>,
        sources: [any EventSource<Event>],
        observer: (any LoopObserver<Event, Effect>)?,
        clock: any Clock<Duration>,
        inbox: InboxPolicy
    ) {
        self.router = router
        self.sources = sources
        self.observer = observer
        self.clock = clock
        self.inbox = inbox
    }

    @inlinable
    func observe(_ activity: @autoclosure () -> LoopActivity<Event, Effect>) {
        observer?.observe(activity())
    }
}
