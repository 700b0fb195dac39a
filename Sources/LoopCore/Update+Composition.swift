extension Update {
    /// Runs several updates over one domain, one after the other, on the same event.
    ///
    /// Each update sees the state as the previous one left it. The effects are those of the first
    /// update, then those of the second, and so on.
    @inlinable
    public static func combine(_ updates: Update...) -> Update {
        combine(updates)
    }

    /// Runs several updates over one domain, one after the other, on the same event.
    ///
    /// Each update sees the state as the previous one left it. The effects are those of the first
    /// update, then those of the second, and so on.
    @inlinable
    public static func combine(_ updates: [Update]) -> Update {
        Update { state, event in
            var effects: [Effect] = []
            for update in updates {
                let produced = update(&state, event)
                if effects.isEmpty {
                    effects = produced
                } else {
                    effects.append(contentsOf: produced)
                }
            }
            return effects
        }
    }

    /// Lifts a child update into this domain.
    ///
    /// An event for which `event` returns a child event is applied to the child state at `state`, in
    /// place; each child effect becomes a parent effect through `effect`. Any other event leaves the
    /// state as it is and produces no effect. Combine the result with the parent's own update with
    /// ``combine(_:)-(Update<State,Event,Effect>...)``.
    ///
    /// ```swift
    /// let app = Update<AppState, AppEvent, AppEffect>.embed(
    ///     Update(Counter.update),
    ///     state: \.counter,
    ///     event: { if case .counter(let event) = $0 { event } else { nil } },
    ///     effect: AppEffect.counter
    /// )
    /// ```
    @inlinable
    public static func embed<ChildState, ChildEvent, ChildEffect>(
        _ child: Update<ChildState, ChildEvent, ChildEffect>,
        state: any WritableKeyPath<State, ChildState> & Sendable,
        event toChild: @escaping @Sendable (Event) -> ChildEvent?,
        effect toParent: @escaping @Sendable (ChildEffect) -> Effect
    ) -> Update {
        Update { parent, event in
            guard let childEvent = toChild(event) else { return [] }
            return child(&parent[keyPath: state], childEvent).map(toParent)
        }
    }

    /// Lifts a child update into this domain, for a child that exists only some of the time.
    ///
    /// Works as ``embed(_:state:event:effect:)`` while the child state at `state` is present. An event
    /// for the child while it is absent changes nothing; it produces the effects `absent` returns for it,
    /// so the program can say so, or none when `absent` is not given.
    @inlinable
    public static func embedIfPresent<ChildState, ChildEvent, ChildEffect>(
        _ child: Update<ChildState, ChildEvent, ChildEffect>,
        state: any WritableKeyPath<State, ChildState?> & Sendable,
        event toChild: @escaping @Sendable (Event) -> ChildEvent?,
        effect toParent: @escaping @Sendable (ChildEffect) -> Effect,
        absent: (@Sendable (Event) -> [Effect])? = nil
    ) -> Update {
        Update { parent, event in
            guard let childEvent = toChild(event) else { return [] }
            let produced = parent[keyPath: state].modifyIfPresent { child(&$0, childEvent) }
            guard let produced else { return absent?(event) ?? [] }
            return produced.map(toParent)
        }
    }

    /// Lifts a child update into this domain for a child whose state is one case of an enum (a screen, a
    /// phase of a session): a case path instead of a key path.
    ///
    /// `state` extracts the child state when the parent is in the child's case, and `embed` puts it back.
    /// The child state is mutated in place, never copied: while the child runs, the parent holds
    /// `placeholder()` (any cheap value of the parent, such as a case without payload), so the extracted
    /// child state is the only owner of its storage. An event for the child while the parent is in another
    /// case changes nothing; it produces the effects `absent` returns for it, or none.
    ///
    /// ```swift
    /// let screen = Update<Screen, ScreenEvent, ScreenEffect>.embedCase(
    ///     Update(Checkout.update),
    ///     state: { if case .checkout(let state) = $0 { state } else { nil } },
    ///     embed: Screen.checkout,
    ///     placeholder: { .loading },
    ///     event: { if case .checkout(let event) = $0 { event } else { nil } },
    ///     effect: ScreenEffect.checkout
    /// )
    /// ```
    @inlinable
    public static func embedCase<ChildState, ChildEvent, ChildEffect>(
        _ child: Update<ChildState, ChildEvent, ChildEffect>,
        state extract: @escaping @Sendable (State) -> ChildState?,
        embed: @escaping @Sendable (ChildState) -> State,
        placeholder: @escaping @Sendable () -> State,
        event toChild: @escaping @Sendable (Event) -> ChildEvent?,
        effect toParent: @escaping @Sendable (ChildEffect) -> Effect,
        absent: (@Sendable (Event) -> [Effect])? = nil
    ) -> Update {
        Update { parent, event in
            guard let childEvent = toChild(event) else { return [] }
            guard var childState = extract(parent) else { return absent?(event) ?? [] }
            // The parent still shares the child's storage: replace it first, so the child mutates alone.
            parent = placeholder()
            let produced = child(&childState, childEvent)
            parent = embed(childState)
            return produced.map(toParent)
        }
    }

    /// Lifts a child update into this domain for a keyed collection of children.
    ///
    /// `event` extracts the child's identifier and event; the event is applied in place to the child
    /// with that identifier in the dictionary at `states`, and each child effect becomes a parent
    /// effect through `effect`, which also receives the identifier. An event for an identifier that is
    /// not in the dictionary changes nothing; it produces the effects `absent` returns for it, or none.
    @inlinable
    public static func embedEach<ID: Hashable & Sendable, ChildState, ChildEvent, ChildEffect>(
        _ child: Update<ChildState, ChildEvent, ChildEffect>,
        states: any WritableKeyPath<State, [ID: ChildState]> & Sendable,
        event toChild: @escaping @Sendable (Event) -> (id: ID, event: ChildEvent)?,
        effect toParent: @escaping @Sendable (ID, ChildEffect) -> Effect,
        absent: (@Sendable (Event) -> [Effect])? = nil
    ) -> Update {
        Update { parent, event in
            guard let (id, childEvent) = toChild(event) else { return [] }
            guard let index = parent[keyPath: states].index(forKey: id) else { return absent?(event) ?? [] }
            return child(&parent[keyPath: states].values[index], childEvent).map { toParent(id, $0) }
        }
    }
}

extension Optional {
    /// Runs `body` on the wrapped value in place, without copying it; `nil` when there is none.
    @inlinable
    mutating func modifyIfPresent<Result>(_ body: (inout Wrapped) -> Result) -> Result? {
        guard var wrapped = self else { return nil }
        self = nil
        defer { self = wrapped }
        return body(&wrapped)
    }
}
