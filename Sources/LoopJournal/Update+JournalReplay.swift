public import LoopCore

extension Update where State: Encodable {
    /// Replays `records` from `first` through the update, checking every recorded digest.
    ///
    /// Returns the final state and every effect emitted, as ``/LoopCore/Update/replay(from:events:)``
    /// does. Throws ``JournalError/digestMismatch(sequence:recorded:replayed:)`` naming the first event
    /// after which the replayed state differs from the recorded one.
    public func replay(
        from first: First<State, Effect>,
        journal records: [JournalRecord<Event>]
    ) throws -> Next<State, Effect> {
        var effects = first.effects
        var machine = Machine(state: first.state, update: self)
        for record in records {
            effects.append(contentsOf: machine.process(record.event))
            if let recorded = record.digest {
                let replayed = try StateDigest.of(machine.state)
                guard replayed == recorded else {
                    throw JournalError.digestMismatch(sequence: record.sequence, recorded: recorded, replayed: replayed)
                }
            }
        }
        return Next(state: machine.finish(), effects: effects)
    }
}
