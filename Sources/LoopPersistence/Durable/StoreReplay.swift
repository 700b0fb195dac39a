internal import LoopCore

/// Replays a stream from its first event through a program's pure update, one page in memory at a
/// time, and checks the fold against the stream's latest snapshot: how a tool verifies a store offline
/// (`loop-demo replay --store DIR`), and the gate before a deploy (`loop-demo verify --store DIR`). Each
/// record goes through the update of the program revision that decided it (see
/// ``DurableProgram/replaying(revision:with:)``). Effects are computed and dropped, never kept.
public enum StoreReplay {
    /// What a replay found.
    public struct Outcome<State> {
        /// The state after the last event.
        public var state: State
        /// How many records were replayed: the stream's last version (a record of timers that started,
        /// which holds no event, counts as one; see ``DurableProgram/keepingTimers(codec:)``).
        public var events: UInt64
        /// The version of the snapshot the fold matched, if the stream has one.
        public var snapshotVersion: UInt64?

        /// `; the snapshot at version N matched`, or nothing when there is no snapshot.
        public var snapshotCheck: String {
            snapshotVersion.map { "; the snapshot at version \($0) matched" } ?? ""
        }
    }

    /// Why a replay stopped: names the stream and the version.
    public struct Failure: Error, Hashable, Sendable, CustomStringConvertible {
        /// A sentence naming the stream, the version, and what went wrong; for a snapshot that differs
        /// from the replay, a line per difference after it (`  balance: 27 → 24`, the snapshot's value
        /// first).
        public var description: String
    }

    /// Replays `stream` of `store` through `program`, decoding with the codecs.
    public static func run<State: Equatable, Event, Effect>(
        store: any EventStore,
        stream: String,
        program: DurableProgram<State, Event, Effect>,
        events: some EventCodec<Event>,
        states: some EventCodec<State>
    ) async throws -> Outcome<State> {
        let snapshot = try await store.latestSnapshot(of: stream)
        var outcome = Outcome(state: program.initial, events: 0, snapshotVersion: nil)
        func check(_ state: borrowing State) throws {
            guard let snapshot, snapshot.version == outcome.events else { return }
            let saved: State
            do {
                // What a durable loop keeps beside the state (its callers' keys) is not the program's.
                saved = try states.decode(try RecordEnvelope.snapshot(snapshot.payload, capacity: 1).state)
            } catch {
                throw Failure(
                    description:
                        "stream '\(stream)': the snapshot at version \(snapshot.version) does not decode: \(error)"
                )
            }
            guard saved == state else {
                // What the replay made, against what the program that saved the snapshot had.
                let differences = StateDifference.lines(from: saved, to: copy state)
                throw Failure(
                    description:
                        "stream '\(stream)': the snapshot at version \(snapshot.version) differs from the events before it"
                        + differences.map { "\n  \($0)" }.joined()
                )
            }
            outcome.snapshotVersion = snapshot.version
        }
        try check(outcome.state)
        var state = outcome.state
        var revision: UInt32 = 1
        do {
            outcome.events = try await StoreFold.fold(
                stream,
                of: store,
                after: 0,
                into: &state,
                revision: &revision,
                program: program,
                events: events
            ) { _, version, state in
                outcome.events = version
                try check(state)
            }
        } catch let undecodable as StoreFold.Undecodable {
            throw Failure(
                description:
                    "stream '\(stream)': the event at version \(undecodable.version) does not decode: \(undecodable.reason)"
            )
        } catch let unknown as StoreFold.UnknownRevision {
            throw Failure(
                description: DurableFailure(
                    .unknownRevision(unknown.revision, version: unknown.version, running: program.revision),
                    stream: stream
                ).description
            )
        }
        outcome.state = state
        if let snapshot, outcome.snapshotVersion == nil {
            throw Failure(
                description:
                    "stream '\(stream)': a snapshot at version \(snapshot.version), past its last event \(outcome.events)"
            )
        }
        return outcome
    }
}

extension StoreReplay {
    /// What ``verify(store:streams:program:events:states:)`` found.
    public struct Verification: Hashable, Sendable {
        /// The streams replayed.
        public var streams: Int
        /// The records of the streams that replayed.
        public var records: UInt64
        /// Why each stream that did not replay failed, in the order the streams were given: empty when
        /// every one replays.
        public var failures: [Failure]
    }

    /// Replays each of `streams` as ``run(store:stream:program:events:states:)`` does: the check before a
    /// deploy. A stream that does not replay (a revision the program does not keep, a record that no
    /// longer decodes, a snapshot that differs, damage the store finds) is reported, and the others are
    /// still checked.
    public static func verify<State: Equatable, Event, Effect>(
        store: any EventStore,
        streams: some Sequence<String>,
        program: DurableProgram<State, Event, Effect>,
        events: some EventCodec<Event>,
        states: some EventCodec<State>
    ) async -> Verification {
        var verification = Verification(streams: 0, records: 0, failures: [])
        for stream in streams {
            verification.streams += 1
            do {
                let outcome = try await run(
                    store: store,
                    stream: stream,
                    program: program,
                    events: events,
                    states: states
                )
                verification.records += outcome.events
            } catch let failure as Failure {
                verification.failures.append(failure)
            } catch {
                verification.failures.append(Failure(description: "stream '\(stream)': \(error)"))
            }
        }
        return verification
    }
}

extension StoreReplay {
    /// Replays with ``BinaryCodec`` (the durable loops' default) for events and states.
    public static func run<State: Equatable & Codable, Event: Codable, Effect>(
        store: any EventStore,
        stream: String,
        program: DurableProgram<State, Event, Effect>
    ) async throws -> Outcome<State> {
        try await run(
            store: store,
            stream: stream,
            program: program,
            events: BinaryCodec<Event>(),
            states: BinaryCodec<State>()
        )
    }
}

extension EventStoreError {
    /// Whether the store's data is damaged (rather than the store being unavailable or failing I/O).
    public var isDamage: Bool {
        if case .corrupted = kind { true } else { false }
    }
}
