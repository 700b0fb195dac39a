internal import EffectHandlers
internal import EventSources

/// What every loop of one kind shares: how effects are performed, the sources, the observer and the
/// clock. One instance serves a standalone loop, or every loop of a ``LoopGroup``, so a per-entity
/// loop carries a single reference to it.
final class LoopContext<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    let router: EffectRouter<Effect, Event>
    let sources: [any EventSource<Event>]
    let observer: (any LoopObserver<Event, Effect>)?
    let clock: any Clock<Duration>
    let inbox: InboxPolicy

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

    func observe(_ activity: @autoclosure () -> LoopActivity<Event, Effect>) {
        observer?.observe(activity())
    }
}
