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

    /// A record decided by a program revision the program neither is nor replays, at `version`.
    @usableFromInline
    struct UnknownRevision: Error {
        @usableFromInline let revision: UInt32
        @usableFromInline let version: UInt64

        @inlinable
        init(revision: UInt32, version: UInt64) {
            self.revision = revision
            self.version = version
        }
    }

    /// Folds the records of `stream` after `version` into `state`, each through the update of the
    /// program revision that decided it (`revision` is the one of the record at `version`, and is left
    /// at the last one's); returns the last version folded (`version` when there is none). Throws
    /// ``Undecodable`` for a record that does not decode, ``UnknownRevision`` for one whose revision the
    /// program does not replay (nothing of it is applied), the store's error if reading fails, and
    /// whatever `afterEach` throws.
    @inlinable
    static func fold<State, Event, Effect>(
        _ stream: String,
        of store: any EventStore,
        after version: UInt64,
        into state: inout State,
        revision: inout UInt32,
        program: DurableProgram<State, Event, Effect>,
        events: any EventCodec<Event>,
        afterEach: (_ note: EventNote?, _ version: UInt64, _ state: borrowing State) throws -> Void
    ) async throws -> UInt64 {
        var last = version
        var update = program.update(ofRevision: revision)
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
            if let recorded = note?.revision, recorded != revision {
                revision = recorded
                update = program.update(ofRevision: recorded)
            }
            if let event {
                guard let update else { throw UnknownRevision(revision: revision, version: stored.version) }
                _ = update(&state, event)
            }
            last = stored.version
            try afterEach(note, last, state)
        }
        return last
    }
}
