public import EffectHandlers
public import EventSources

/// Where a loop's activities go: the observer of a standalone loop, or the group's observer with the
/// entity each loop belongs to.
@usableFromInline
struct ActivitySink<Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline
    let deliver: @Sendable (LoopActivity<Event, Effect>, (any Sendable)?) -> Void

    @inlinable
    init(_ deliver: @escaping @Sendable (LoopActivity<Event, Effect>, (any Sendable)?) -> Void) {
        self.deliver = deliver
    }
}

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
    let sink: ActivitySink<Event, Effect>?
    @usableFromInline
    let clock: any Clock<Duration>
    @usableFromInline
    let inbox: InboxPolicy

    @usableFromInline
    init(
        router: EffectRouter<Effect, Event>,
        sources: [any EventSource<Event>],
        sink: ActivitySink<Event, Effect>?,
        clock: any Clock<Duration>,
        inbox: InboxPolicy
    ) {
        self.router = router
        self.sources = sources
        self.sink = sink
        self.clock = clock
        self.inbox = inbox
    }

    /// Reports `activity` of the loop for `entity` (`nil` for a standalone loop or the group itself).
    @inlinable
    func observe(_ activity: @autoclosure () -> LoopActivity<Event, Effect>, entity: (any Sendable)?) {
        sink?.deliver(activity(), entity)
    }
}
