public import LoopCore

extension EffectRouter {
    /// Adds a route that delivers replies: effects for which `extract` returns a ``/LoopCore/Reply`` are
    /// performed inline by handing its value to the caller waiting for it (`Loop.request`, in
    /// `LoopRuntime`). A reply nobody waits for any more (the caller's deadline passed, or its task was
    /// cancelled) is dropped: the caller has already had its error.
    ///
    /// ```swift
    /// enum Effect { case answer(Reply<Price>), charge(Order) }
    /// let router = EffectRouter<Effect, Event>()
    ///     .replies { if case .answer(let reply) = $0 { reply } else { nil } }
    ///     .route({ if case .charge(let order) = $0 { order } else { nil } }, to: Payments(client))
    /// ```
    ///
    /// Add one route per reply type.
    @inlinable
    public func replies<Value: Sendable>(_ extract: @escaping @Sendable (Effect) -> Reply<Value>?) -> EffectRouter {
        route(extract, to: ClosureSyncEffectHandler<Reply<Value>, Event> { reply, _ in reply.deliver() })
    }
}
