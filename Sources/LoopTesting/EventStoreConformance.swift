public import LoopPersistence
internal import LoopRuntime

/// The checks every ``/LoopPersistence/EventStore`` must pass, run against a store a test makes.
///
/// ```swift
/// @Test func inMemoryStoreConforms() async {
///     await EventStoreConformance { InMemoryEventStore() }.run()
/// }
/// ```
///
/// Each check gets a fresh store from `makeStore`. A failing check fails the running test
/// (Swift Testing or XCTest), named, with what it expected and what it found.
public struct EventStoreConformance: Sendable {
    /// One check: its name, and its body, which returns what went wrong (nothing when it passes).
    public struct Check: Sendable {
        /// What the check proves, as a sentence.
        public let name: String
        /// Runs the check against a fresh store.
        public let body: @Sendable (any EventStore) async throws -> [String]
    }

    /// What a store that keeps its data across processes lets the suite do to it, so it can check what
    /// survives a crash: a store in memory has nothing to offer and skips those checks.
    public struct Durability: Sendable {
        /// Closes `store` as a crash would (no clean shutdown needed) and opens it again.
        public var reopen: @Sendable (any EventStore) async throws -> any EventStore
        /// Closes `store`, leaves the start of one more record after its last, as a write cut short by a
        /// crash would, and opens it again.
        public var tearTail: @Sendable (any EventStore) async throws -> any EventStore
        /// Closes `store`, damages a record that has others after it, and opens it again: that must fail.
        public var corruptMiddle: @Sendable (any EventStore) async throws -> any EventStore

        /// Describes what the suite may do to a durable store.
        public init(
            reopen: @escaping @Sendable (any EventStore) async throws -> any EventStore,
            tearTail: @escaping @Sendable (any EventStore) async throws -> any EventStore,
            corruptMiddle: @escaping @Sendable (any EventStore) async throws -> any EventStore
        ) {
            self.reopen = reopen
            self.tearTail = tearTail
            self.corruptMiddle = corruptMiddle
        }
    }

    private let makeStore: @Sendable () async throws -> any EventStore
    private let scale: Int
    private let durability: Durability?

    /// A suite for the stores `makeStore` makes. `scale` is how many events the scale check writes and
    /// reads back through bounded pages (a million by default). A durable store passes `durability`, and
    /// the suite also checks a reopen, a torn tail and corruption in the middle.
    public init(
        scale: Int = 1_000_000,
        durability: Durability? = nil,
        _ makeStore: @escaping @Sendable () async throws -> any EventStore
    ) {
        self.makeStore = makeStore
        self.scale = scale
        self.durability = durability
    }

    /// Runs every check, failing the running test on each failure; returns the failures.
    @discardableResult
    public func run(
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async -> [String] {
        var failures: [String] = []
        for check in checks {
            do {
                let store = try await makeStore()
                failures += try await check.body(store).map { "\(check.name): \($0)" }
            } catch {
                failures.append("\(check.name): threw \(error)")
            }
        }
        let site = SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        for failure in failures { site.fail("event store conformance: \(failure)") }
        return failures
    }

    /// Every check, in the order they run.
    public var checks: [Check] {
        [
            Check(name: "a new stream is empty", body: Self.newStreamIsEmpty),
            Check(name: "appends are read back in order", body: Self.appendsReadBackInOrder),
            Check(name: "a stale append conflicts and writes nothing", body: Self.staleAppendConflicts),
            Check(name: "streams are independent", body: Self.streamsAreIndependent),
            Check(name: "a name's spellings are one stream", body: Self.spellingsAreOneStream),
            Check(name: "concurrent writers append every event exactly once", body: Self.concurrentWriters),
            Check(name: "reads during writes see a prefix", body: Self.readsDuringWrites),
            Check(name: "the latest snapshot wins", body: Self.snapshots),
            Check(name: "\(scale) events are read back through bounded pages") { store in
                try await Self.scaleReads(store, count: self.scale)
            },
        ] + durabilityChecks
    }

    private var durabilityChecks: [Check] {
        guard let durability else { return [] }
        return [
            Check(name: "what was acknowledged is there after a reopen") { store in
                try await Self.survivesReopen(store, durability)
            },
            Check(name: "a torn tail is dropped and nothing acknowledged is lost") { store in
                try await Self.tornTail(store, durability)
            },
            Check(name: "corruption in the middle is an error, never skipped") { store in
                try await Self.corruption(store, durability)
            },
        ]
    }

    static func survivesReopen(_ store: any EventStore, _ durability: Durability) async throws -> [String] {
        var failures: [String] = []
        _ = try await store.append((1...3).map(payload), to: "a", expecting: 0)
        _ = try await store.append([payload(4)], to: "b", expecting: 0)
        try await store.save(Snapshot(stream: "a", version: 2, payload: [2]))
        let reopened = try await durability.reopen(store)
        let a = try await reopened.read("a", after: 0, limit: 10).map(\.payload)
        let b = try await reopened.version(of: "b")
        let snapshot = try await reopened.latestSnapshot(of: "a")
        expect(a == (1...3).map(payload), "after a reopen 'a' holds \(a)", into: &failures)
        expect(b == 1, "after a reopen 'b' is at version \(b)", into: &failures)
        expect(
            snapshot?.version == 2,
            "after a reopen the snapshot is \(String(describing: snapshot))",
            into: &failures
        )
        return failures
    }

    static func tornTail(_ store: any EventStore, _ durability: Durability) async throws -> [String] {
        var failures: [String] = []
        _ = try await store.append([payload(1)], to: "s", expecting: 0)
        _ = try await store.append([payload(2), payload(3)], to: "s", expecting: 1)
        let reopened = try await durability.tearTail(store)
        let events = try await reopened.read("s", after: 0, limit: 10).map(\.payload)
        expect(events == (1...3).map(payload), "after a torn tail 's' holds \(events)", into: &failures)
        let next = try await reopened.append([payload(4)], to: "s", expecting: 3)
        expect(next == 4, "an append after a torn tail made version \(next)", into: &failures)
        return failures
    }

    static func corruption(_ store: any EventStore, _ durability: Durability) async throws -> [String] {
        _ = try await store.append([payload(1)], to: "s", expecting: 0)
        _ = try await store.append([payload(2)], to: "s", expecting: 1)
        _ = try await store.append([payload(3)], to: "s", expecting: 2)
        do {
            let opened = try await durability.corruptMiddle(store)
            let events = try await opened.read("s", after: 0, limit: 10)
            return ["a store with a damaged record opened and read \(events.count) events"]
        } catch let error as EventStoreError {
            guard case .corrupted = error.kind else { return ["opening a damaged store failed with \(error)"] }
            return []
        }
    }

    static func payload(_ number: Int) -> [UInt8] {
        Array("event \(number)".utf8)
    }

    static func expect(_ condition: Bool, _ message: @autoclosure () -> String, into failures: inout [String]) {
        if !condition { failures.append(message()) }
    }

    static func newStreamIsEmpty(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        let version = try await store.version(of: "nothing")
        expect(version == 0, "version \(version), expected 0", into: &failures)
        let events = try await store.read("nothing", after: 0, limit: 10)
        expect(events.isEmpty, "read \(events.count) events, expected none", into: &failures)
        let snapshot = try await store.latestSnapshot(of: "nothing")
        expect(snapshot == nil, "a snapshot \(String(describing: snapshot)), expected none", into: &failures)
        return failures
    }

    static func appendsReadBackInOrder(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        let first = try await store.append((1...3).map(payload), to: "s", expecting: 0)
        let second = try await store.append((4...5).map(payload), to: "s", expecting: 3)
        let unchanged = try await store.append([], to: "s", expecting: 5)
        expect(
            first == 3 && second == 5 && unchanged == 5,
            "versions \(first), \(second), \(unchanged)",
            into: &failures
        )
        let all = try await store.read("s", after: 0, limit: 100)
        let expected = (1...5).map { StoredEvent(stream: "s", version: UInt64($0), payload: payload($0)) }
        expect(all == expected, "read \(all), expected \(expected)", into: &failures)
        let middle = try await store.read("s", after: 2, limit: 2).map(\.version)
        expect(middle == [3, 4], "read after 2, limit 2: versions \(middle), expected [3, 4]", into: &failures)
        let past = try await store.read("s", after: 5, limit: 10)
        expect(past.isEmpty, "read past the end: \(past.count) events", into: &failures)
        return failures
    }

    static func staleAppendConflicts(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        _ = try await store.append((1...3).map(payload), to: "s", expecting: 0)
        do {
            _ = try await store.append([payload(99)], to: "s", expecting: 1)
            failures.append("an append expecting version 1 of a stream at 3 succeeded")
        } catch let error as EventStoreError {
            expect(
                error.kind == .versionConflict(expected: 1, actual: 3) && error.stream == "s",
                "error \(error), expected a version conflict (expected 1, actual 3) on 's'",
                into: &failures
            )
        }
        let version = try await store.version(of: "s")
        expect(version == 3, "version \(version) after the conflict, expected 3", into: &failures)
        let kept = try await store.read("s", after: 0, limit: 10).map(\.payload)
        expect(kept == (1...3).map(payload), "the events after the conflict are \(kept)", into: &failures)
        return failures
    }

    static func streamsAreIndependent(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        _ = try await store.append([payload(1)], to: "a", expecting: 0)
        _ = try await store.append([payload(2), payload(3)], to: "b", expecting: 0)
        let a = try await store.read("a", after: 0, limit: 10).map(\.payload)
        let b = try await store.read("b", after: 0, limit: 10).map(\.payload)
        expect(a == [payload(1)] && b == [payload(2), payload(3)], "a \(a), b \(b)", into: &failures)
        return failures
    }

    /// Names that Swift holds equal are one stream, as they are one key of the `[String: …]` tables a
    /// program keeps and one entity of a `LoopGroup` keyed by strings: "é" written as one scalar or as
    /// "e" and a combining accent, "K" and the Kelvin sign. A store that kept them apart would split one
    /// entity's events between two streams, and recover it from one of them.
    static func spellingsAreOneStream(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        let one = "caf\u{E9}-\u{212B}-K"  // é as one scalar, the angstrom sign, K
        let other = "cafe\u{301}-A\u{30A}-\u{212A}"  // e + accent, A + ring, the Kelvin sign
        _ = try await store.append([payload(1)], to: one, expecting: 0)
        do {
            _ = try await store.append([payload(2)], to: other, expecting: 1)
        } catch {
            failures.append("appending under the other spelling at version 1 failed: \(error)")
        }
        let read = try await store.read(one, after: 0, limit: 10).map(\.payload)
        expect(read == [payload(1), payload(2)], "one spelling reads \(read)", into: &failures)
        let version = try await store.version(of: other)
        expect(version == 2, "the other spelling is at version \(version)", into: &failures)
        try await store.save(Snapshot(stream: other, version: 2, payload: [2]))
        let snapshot = try await store.latestSnapshot(of: one)
        expect(
            snapshot?.version == 2 && snapshot?.payload == [2],
            "its snapshot is \(String(describing: snapshot))",
            into: &failures
        )
        let plain = try await store.version(of: "cafe-A-K")
        expect(plain == 0, "the name without accents (another text) is at version \(plain)", into: &failures)
        return failures
    }

    /// Eight writers append 50 events each to one stream, retrying on conflict as a durable loop would.
    static func concurrentWriters(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        let (writers, each) = (8, 50)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for index in 0..<each {
                        // A store that never lets an append through fails the check instead of hanging it.
                        for attempt in 0... {
                            guard attempt < 10_000, !Task.isCancelled else {
                                throw EventStoreError(
                                    .unavailable(reason: "an append never got through"),
                                    stream: "shared"
                                )
                            }
                            let version = try await store.version(of: "shared")
                            do {
                                _ = try await store.append(
                                    [payload(writer * 1_000 + index)],
                                    to: "shared",
                                    expecting: version
                                )
                                break
                            } catch let error as EventStoreError {
                                guard case .versionConflict = error.kind else { throw error }
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let events = try await store.read("shared", after: 0, limit: writers * each + 10)
        expect(events.count == writers * each, "\(events.count) events, expected \(writers * each)", into: &failures)
        expect(
            events.map(\.version) == (1...UInt64(writers * each)).map { $0 },
            "versions are not 1...\(writers * each) without gaps",
            into: &failures
        )
        let written = Set((0..<writers).flatMap { writer in (0..<each).map { payload(writer * 1_000 + $0) } })
        expect(Set(events.map(\.payload)) == written, "the payloads differ from those written", into: &failures)
        return failures
    }

    /// A writer appends one event at a time while a reader reads the stream over and over: every read
    /// is a gap-free prefix of what is written.
    static func readsDuringWrites(_ store: any EventStore) async throws -> [String] {
        let count = 500
        return try await withThrowingTaskGroup(of: [String].self) { group in
            let writing = WriterState()
            group.addTask {
                defer { writing.finish() }
                for index in 1...count {
                    _ = try await store.append([payload(index)], to: "s", expecting: UInt64(index - 1))
                }
                return []
            }
            group.addTask {
                var failures: [String] = []
                var seen = 0
                // Until it has seen every event; or, once the writer is done, after one more read.
                while seen < count && !Task.isCancelled {
                    let writerDone = writing.isDone
                    let events = try await store.read("s", after: 0, limit: count)
                    let expected = (0..<events.count).map {
                        StoredEvent(stream: "s", version: UInt64($0 + 1), payload: payload($0 + 1))
                    }
                    if events != expected {
                        failures.append("a read during writes was not a prefix: \(events.prefix(5))…")
                        break
                    }
                    seen = events.count
                    if writerDone && seen < count {
                        failures.append("after every append, a read found \(seen) of \(count) events")
                        break
                    }
                    await Task.yield()
                }
                return failures
            }
            var failures: [String] = []
            for try await found in group { failures += found }
            return failures
        }
    }

    static func snapshots(_ store: any EventStore) async throws -> [String] {
        var failures: [String] = []
        _ = try await store.append((1...5).map(payload), to: "s", expecting: 0)
        try await store.save(Snapshot(stream: "s", version: 2, payload: [2]))
        try await store.save(Snapshot(stream: "s", version: 5, payload: [5]))
        try await store.save(Snapshot(stream: "s", version: 3, payload: [3]))
        let latest = try await store.latestSnapshot(of: "s")
        expect(
            latest == Snapshot(stream: "s", version: 5, payload: [5]),
            "latest \(String(describing: latest))",
            into: &failures
        )
        do {
            try await store.save(Snapshot(stream: "s", version: 9, payload: [9]))
            failures.append("a snapshot past the stream's version was saved")
        } catch is EventStoreError {}
        let other = try await store.latestSnapshot(of: "other")
        expect(other == nil, "another stream has snapshot \(String(describing: other))", into: &failures)
        return failures
    }

    /// `count` events in batches of 1,000, read back through the paged sequence: every event in order,
    /// never more than one page asked for at a time.
    static func scaleReads(_ store: any EventStore, count: Int) async throws -> [String] {
        var failures: [String] = []
        var version: UInt64 = 0
        while version < UInt64(count) {
            let batch = min(1_000, count - Int(version))
            version = try await store.append(
                (0..<batch).map { payload(Int(version) + $0 + 1) },
                to: "big",
                expecting: version
            )
        }
        var expected: UInt64 = 1
        for try await event in store.events(of: "big", pageSize: 4_096) {
            guard event.version == expected else {
                failures.append("event \(event.version) where \(expected) was due")
                break
            }
            expected += 1
        }
        expect(expected == UInt64(count) + 1, "read \(expected - 1) of \(count) events", into: &failures)
        let page = try await store.read("big", after: 0, limit: 100)
        expect(page.count == 100, "a page of limit 100 held \(page.count) events", into: &failures)
        return failures
    }
}

/// Whether the writer of a read-during-writes check has finished (successfully or not).
final class WriterState: Sendable {
    private let done = Locked(false)

    var isDone: Bool { done.withLock { $0 } }

    func finish() {
        done.withLock { $0 = true }
    }
}
