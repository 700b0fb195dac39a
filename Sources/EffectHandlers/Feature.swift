public import LoopCore

/// A feature: its update and the routes of its effects, shipped together, so a parent embeds both with
/// one call and never rewrites a child's routes by hand.
///
/// ```swift
/// // In the feature's module:
/// public static let feature = Feature(update: Update(Cart.update), effects: Cart.router(services))
///
/// // In the parent:
/// let app = Feature<App.State, App.Event, App.Effect>.combine(
///     Feature(update: Update(App.update), effects: App.router),
///     Cart.feature.embedded(
///         state: \.cart,
///         event: { if case .cart(let event) = $0 { event } else { nil } }, embedEvent: App.Event.cart,
///         effect: App.Effect.cart, extractEffect: { if case .cart(let effect) = $0 { effect } else { nil } }
///     )
/// )
/// let loop = Loop(program: Program(first: first, update: app.update), effects: app.effects)
/// ```
///
/// The update stays pure and is tested as before; the embedded update is ``/LoopCore/Update/embed(_:state:event:effect:)``,
/// so the child's state is mutated in place.
public struct Feature<State, Event: Sendable, Effect: Sendable>: Sendable {
    /// The feature's logic.
    public var update: Update<State, Event, Effect>
    /// How its effects are performed.
    public var effects: EffectRouter<Effect, Event>

    /// Bundles `update` with `effects`.
    @inlinable
    public init(update: Update<State, Event, Effect>, effects: EffectRouter<Effect, Event>) {
        self.update = update
        self.effects = effects
    }

    /// This feature inside a parent: its state at `state`, its events and effects found in and lifted
    /// to the parent's by the four closures (a case of the parent's enums, usually).
    @inlinable
    public func embedded<ParentState, ParentEvent: Sendable, ParentEffect: Sendable>(
        state: any WritableKeyPath<ParentState, State> & Sendable,
        event: @escaping @Sendable (ParentEvent) -> Event?,
        embedEvent: @escaping @Sendable (Event) -> ParentEvent,
        effect: @escaping @Sendable (Effect) -> ParentEffect,
        extractEffect: @escaping @Sendable (ParentEffect) -> Effect?
    ) -> Feature<ParentState, ParentEvent, ParentEffect> {
        Feature<ParentState, ParentEvent, ParentEffect>(
            update: .embed(update, state: state, event: event, effect: effect),
            effects: EffectRouter<ParentEffect, ParentEvent>().embedding(
                effects,
                effect: extractEffect,
                event: embedEvent
            )
        )
    }

    /// The features side by side: their updates combined in order, their routers in order.
    @inlinable
    public static func combine(_ features: Feature...) -> Feature {
        Feature(
            update: .combine(features.map(\.update)),
            effects: features.dropFirst().reduce(features.first?.effects ?? EffectRouter()) {
                $0.combined(with: $1.effects)
            }
        )
    }
}
