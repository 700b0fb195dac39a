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
public struct EffectRouter<Effect: Sendable, Event: Sendable>: Sendable {
    /// How one effect is performed, as chosen by its route.
    public enum Performer: Sendable {
        /// Performed inline right after the update, without a task.
        case sync(@Sendable (Send<Event>) throws -> Void)
        /// Performed in a task of its own.
        case async(@Sendable (Send<Event>) async throws -> Void)
    }

    private var routes: [@Sendable (Effect) -> Performer?] = []
    private var errorMapping: (@Sendable (Effect, any Error) -> Event?)?
    private let lifecycleOf: @Sendable (Effect) -> EffectLifecycle

    /// Creates an empty router; every effect it routes runs ``EffectLifecycle/immediate``.
    public init() {
        lifecycleOf = { _ in .immediate }
    }

    /// Creates an empty router that schedules each effect by its ``ManagedEffect/lifecycle``.
    public init() where Effect: ManagedEffect {
        lifecycleOf = { $0.lifecycle }
    }

    /// Adds a route: effects for which `extract` returns a payload are performed by `handler`, in a task.
    public func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some EffectHandler<Payload, Event>
    ) -> EffectRouter {
        var copy = self
        copy.routes.append { effect in
            extract(effect).map { payload in .async { send in try await handler.handle(payload, send: send) } }
        }
        return copy
    }

    /// Adds a route: effects for which `extract` returns a payload are performed by `handler`, inline.
    public func route<Payload>(
        _ extract: @escaping @Sendable (Effect) -> Payload?,
        to handler: some SyncEffectHandler<Payload, Event>
    ) -> EffectRouter {
        var copy = self
        copy.routes.append { effect in
            extract(effect).map { payload in .sync { send in try handler.handle(payload, send: send) } }
        }
        return copy
    }

    /// Turns errors of effects (thrown by a handler, a timeout, or no route) into events for the update.
    ///
    /// Return `nil` for an error the program does not handle; it then goes to the loop's observer.
    public func mapErrors(_ transform: @escaping @Sendable (Effect, any Error) -> Event?) -> EffectRouter {
        var copy = self
        copy.errorMapping = transform
        return copy
    }

    /// The performer the first matching route chooses for `effect`, or `nil` when no route accepts it.
    public func performer(for effect: Effect) -> Performer? {
        for route in routes {
            if let performer = route(effect) { return performer }
        }
        return nil
    }

    /// How `effect` is scheduled.
    public func lifecycle(of effect: Effect) -> EffectLifecycle {
        lifecycleOf(effect)
    }

    /// The event the program maps `error` of `effect` to, if it maps it.
    public func event(for error: any Error, of effect: Effect) -> Event? {
        errorMapping?(effect, error)
    }
}
