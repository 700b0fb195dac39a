extension Update {
    /// Folds `events` through the update, starting from `first`.
    ///
    /// Returns the final state and every effect emitted, in order: the start-up effects of `first`, then
    /// the effects of each event in turn. Replaying the same events from the same start always gives
    /// the same result, which is what makes a recorded journal of events reproducible.
    @inlinable
    public func replay(from first: consuming First<State, Effect>, events: some Sequence<Event>) -> Next<State, Effect>
    {
        var effects = first.effects
        var machine = Machine(state: first.state, update: self)
        _ = consume first
        for event in events {
            effects.append(contentsOf: machine.process(event))
        }
        return Next(state: machine.finish(), effects: effects)
    }
}
