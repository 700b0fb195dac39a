import LoopCore
import Testing

@testable import LoopPersistence

/// Snapshots change form too: a durable loop whose `states:` codec is versioned recovers from a snapshot
/// an earlier release saved in its own form.
@Suite struct VersionedCodecTests {
    /// Release 1's state, as its snapshots hold it: the same facts under other names.
    struct StateV1: Codable {
        var money: Int
        var charged: Int
    }

    static let states = VersionedCodec(version: 2, codec: BinaryCodec<Fees.State>())
        .upcasting(VersionedCodec(version: 1, codec: BinaryCodec<StateV1>())) { old in
            Fees.State(balance: old.money, fees: old.charged)
        }

    /// A stream release 1 wrote: two deposits and a snapshot after them, in its form.
    func releaseOnesStream(in store: any EventStore) async throws {
        let events = try [10, 10].map { try BinaryCodec<Fees.Event>().encode(.deposit($0)) }
        _ = try await store.append(events, to: "account", expecting: 0)
        let snapshot = try BinaryCodec<StateV1>().encode(StateV1(money: 18, charged: 2))
        try await store.save(Snapshot(stream: "account", version: 2, payload: snapshot))
    }

    func recover(from store: any EventStore, states: any EventCodec<Fees.State>) async throws -> Fees.State {
        try await Fees.run(Fees.first, on: store, states: states)
    }

    @Test func aSnapshotInAnEarlierFormIsReadThroughItsUpcaster() async throws {
        let store = InMemoryEventStore()
        try await releaseOnesStream(in: store)
        #expect(try await recover(from: store, states: Self.states) == Fees.State(balance: 18, fees: 2))
    }

    @Test func withoutItTheStreamFailsNamingTheSnapshotItsVersionAndTheType() async throws {
        let store = InMemoryEventStore()
        try await releaseOnesStream(in: store)
        do {
            _ = try await recover(from: store, states: VersionedCodec(version: 2, codec: BinaryCodec<Fees.State>()))
            Issue.record("a snapshot of another form was read as today's")
        } catch DurableLoopError.storeFailed(let failure) {
            #expect(
                failure.description
                    == "stream 'account': the snapshot at version 2 does not decode: State in the form of version 1, "
                    + "and this release (version 2) has no upcaster from it"
            )
        }
    }

    @Test func aFormLaterThanTheCodecsIsRefusedNotMisread() throws {
        let later = try VersionedCodec(version: 3, codec: BinaryCodec<Fees.State>()).encode(Fees.State())
        #expect(throws: CodecError("State in the form of version 3, later than this release's (version 2)")) {
            try Self.states.decode(later)
        }
    }
}
