/// A program's logic: how the state changes in response to an event, and which effects that asks for.
///
/// An update is a pure function of its inputs. Write it in one of two shapes:
///
/// - **In place** (recommended): `(inout State, Event) -> [Effect]`. The update mutates the state it is
///   given and returns the effects. This form never copies the state, in any build mode, and stays
///   copy-free when the update is embedded in a parent (see ``embed(_:state:event:effect:)``).
/// - **Pure value**: `(consuming State, Event) -> Next<State, Effect>`, the Elm and Mobius shape. Mutate
///   the `consuming` parameter itself and return it (`state.items.append(x); return Next(state: state)`).
///   It is copy-free in optimised builds; in debug builds, pass a closure or a global function rather
///   than a static method, whose reference thunk copies the state.
///
/// Either way, a test calls the update like a function on plain values:
///
/// ```swift
/// let update = Update(Counter.update)
/// #expect(update(State(count: 1), .increment) == Next(state: State(count: 2), effects: [.log("2")]))
/// ```
///
/// ## The O(1) rule
///
/// A collection inside the state is only appended to in place when nothing else holds the same
/// storage. The runtime hands the update the only reference to its state, so the cost of an event does
/// not grow with the size of the state, as long as the update does not make its own copy: never write
/// `var copy = state` and then mutate `copy`.
public struct Update<State, Event, Effect>: Sendable {
    @usableFromInline
    let body: @Sendable (inout State, Event) -> [Effect]

    /// Creates an update from an in-place function that mutates the state and returns the effects.
    @inlinable
    public init(_ body: @escaping @Sendable (inout State, Event) -> [Effect]) {
        self.body = body
    }

    /// Creates an update from a pure function of the state and the event to their ``Next``.
    ///
    /// The state is handed over (`consuming`), so a function that mutates its parameter and returns it
    /// does not copy the state.
    @inlinable
    public init(next: @escaping @Sendable (consuming State, Event) -> Next<State, Effect>) {
        self.body = { state, event in
            let next = next(consume state, event)
            state = next.state
            return next.effects
        }
    }

    /// Applies `event` to `state` in place and returns the effects it asks for, in order.
    ///
    /// This is the form the runtime uses: the state is never copied.
    @inlinable
    public func callAsFunction(_ state: inout State, _ event: Event) -> [Effect] {
        body(&state, event)
    }

    /// Applies `event` to `state` and returns what it produced, as a value to compare in a test.
    @inlinable
    public func callAsFunction(_ state: consuming State, _ event: Event) -> Next<State, Effect> {
        let effects = body(&state, event)
        return Next(state: state, effects: effects)
    }
}
