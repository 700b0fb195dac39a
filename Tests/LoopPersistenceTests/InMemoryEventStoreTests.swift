import Foundation
import LoopPersistence
import LoopTesting
import Testing

@Suite struct InMemoryEventStoreTests {
    /// A million events in `make test`; fewer under the sanitizers, whose runs look for races and
    /// memory errors, not scale.
    static let scale = ProcessInfo.processInfo.environment["EFFECTLOOP_SANITIZED"] == nil ? 1_000_000 : 20_000

    @Test func passesTheConformanceSuite() async {
        let failures = await EventStoreConformance(scale: Self.scale) { InMemoryEventStore() }.run()
        #expect(failures.isEmpty)
    }

    @Test func theSuiteCatchesAStoreThatOverwritesOnConflict() async throws {
        let suite = EventStoreConformance(scale: 10) { Overwriting() }
        let check = try #require(suite.checks.first { $0.name == "a stale append conflicts and writes nothing" })
        let failures = try await check.body(Overwriting())
        #expect(
            failures == [
                "an append expecting version 1 of a stream at 3 succeeded", "version 4 after the conflict, expected 3",
                "the events after the conflict are \((1...3).map { Array("event \($0)".utf8) } + [Array("event 99".utf8)])",
            ]
        )
    }

    /// A "durable" store whose reopen forgets everything, and which opens damaged data as if whole.
    @Test func theSuiteCatchesAStoreThatLosesDataOrSkipsDamage() async throws {
        let forgetful = EventStoreConformance.Durability(
            reopen: { _ in InMemoryEventStore() },
            tearTail: { store in store },
            corruptMiddle: { store in store }
        )
        let suite = EventStoreConformance(scale: 10, durability: forgetful) { InMemoryEventStore() }
        #expect(suite.checks.suffix(3).map(\.name).first == "what was acknowledged is there after a reopen")
        var found: [String] = []
        for check in suite.checks.suffix(3) { found += try await check.body(InMemoryEventStore()) }
        #expect(found.contains("after a reopen 'a' holds []"))
        #expect(found.contains("a store with a damaged record opened and read 3 events"))
    }

    /// A broken store: it appends whatever version the caller expected.
    final class Overwriting: EventStore {
        let inner = InMemoryEventStore()
        func append(_ payloads: [[UInt8]], to stream: String, expecting expectedVersion: UInt64) async throws -> UInt64
        {
            try await inner.append(payloads, to: stream, expecting: try await inner.version(of: stream))
        }
        func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
            try await inner.read(stream, after: version, limit: limit)
        }
        func version(of stream: String) async throws -> UInt64 { try await inner.version(of: stream) }
        func save(_ snapshot: Snapshot) async throws { try await inner.save(snapshot) }
        func latestSnapshot(of stream: String) async throws -> Snapshot? { try await inner.latestSnapshot(of: stream) }
    }

    @Test func theJSONCodecRoundTripsAndNamesWhatDidNotDecode() throws {
        struct Submitted: Codable, Equatable {
            var name: String
            var attempts: Int
        }
        let codec = JSONCodec<Submitted>()
        let value = Submitted(name: "backup", attempts: 2)
        #expect(try codec.decode(codec.encode(value)) == value)
        #expect(throws: CodecError.self) { try codec.decode(Array(#"{"name":"backup","attempts":"two"}"#.utf8)) }
        do {
            _ = try codec.decode(Array(#"{"name":"backup"}"#.utf8))
        } catch {
            #expect("\(error)".contains("no value for 'attempts'"))
        }
    }
}
