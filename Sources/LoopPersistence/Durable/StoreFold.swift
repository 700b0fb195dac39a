public import LoopCore

/// The one fold of a stored stream through a program's update, one page in memory at a time: what a
/// durable loop's recovery (``DurableStorage``) and the offline check (``StoreReplay``) are built on.
/// Each record is decoded (its event, if it holds one, and what the durable loop noted beside it),
/// the event goes through the update, and `afterEach` sees the note, the record's version and the
/// state it left.
@usableFromInline
enum StoreFold {
    /// A record that does not decode, at `version`.
    @usableFromInline
    struct Undecodable: Error {
        @usableFromInline let version: UInt64
        @usableFromInline let reason: String

        @inlinable
        init(version: UInt64, reason: String) {
            self.version = version
            self.reason = reason
        }
    }

    /// Folds the records of `stream` after `version` into `state`; returns the last version folded
    /// (`version` when there is none). Throws ``Undecodable`` for a record that does not decode, the
    /// store's error if reading fails, and whatever `afterEach` throws.
    @inlinable
    static func fold<State, Event, Effect>(
        _ stream: String,
        of store: any EventStore,
        after version: UInt64,
        into state: inout State,
        update: Update<State, Event, Effect>,
        events: any EventCodec<Event>,
        afterEach: (_ note: EventNote?, _ version: UInt64, _ state: borrowing State) throws -> Void
    ) async throws -> UInt64 {
        var last = version
        for try await stored in store.events(of: stream, after: version) {
            let event: Event?
            let note: EventNote?
            do {
                // A record of a note alone (timers that started) holds no event of the program.
                let record = try RecordEnvelope.event(stored.payload)
                event = try record.event.map(events.decode)
                note = record.note
            } catch {
                throw Undecodable(version: stored.version, reason: "\(error)")
            }
            if let event { _ = update(&state, event) }
            last = stored.version
            try afterEach(note, last, state)
        }
        return last
    }
}
