extension Update {
    /// Folds `events` through the update, starting from `first`.
    ///
    /// Returns the final state and every effect emitted, in order: the start-up effects of `first`, then
    /// the effects of each event in turn. Replaying the same events from the same start always gives
    /// the same result, which is what makes a recorded journal of events reproducible.
    @inlinable
    public func replay(from first: consuming First<State, Effect>, events: some Sequence<Event>) -> Next<State, Effect>
    {
        replay(from: first, events: events) { _, _ in }
    }

    /// Folds `events` through the update, starting from `first`, and calls `afterEach` with each event's
    /// position in `events` (from 0) and the state it left: the one fold every replay is built on (a
    /// journal's replay checks each recorded digest there). A throw from `afterEach` ends the replay.
    @inlinable
    public func replay<Failure: Error>(
        from first: consuming First<State, Effect>,
        events: some Sequence<Event>,
        afterEach: (Int, borrowing State) throws(Failure) -> Void
    ) throws(Failure) -> Next<State, Effect> {
        var effects = first.effects
        var machine = Machine(state: first.state, update: self)
        _ = consume first
        for (position, event) in events.enumerated() {
            effects.append(contentsOf: machine.process(event))
            try afterEach(position, machine.state)
        }
        return Next(state: machine.finish(), effects: effects)
    }
}
