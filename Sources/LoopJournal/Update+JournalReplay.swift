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
        try replay(from: first, events: records.lazy.map(\.event)) { (position, state) throws in
            let record = records[position]
            guard let recorded = record.digest else { return }
            let replayed = try StateDigest.of(copy state)
            guard replayed == recorded else {
                throw JournalError.digestMismatch(sequence: record.sequence, recorded: recorded, replayed: replayed)
            }
        }
    }
}
