import Foundation
import LoopPersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The file store's index checkpoint: an open reads it and only the log after it, gets the same index
/// a whole read builds, and never uses one that does not fit the log.
@Suite struct IndexCheckpointTests {
    /// What a store holds, as reads show it: each stream's events and latest snapshot.
    struct Contents: Equatable {
        var events: [String: [[UInt8]]] = [:]
        var snapshots: [String: Snapshot] = [:]
    }

    static func payload(_ number: Int) -> [UInt8] { Array("event number \(number)".utf8) }

    /// Appends `count` batches over 9 streams (one of them long enough for the index to keep read
    /// checkpoints in it), with a snapshot every 50 batches; returns what was acknowledged, added to
    /// `expected`.
    static func fill(
        _ store: FileEventStore,
        batches count: Int,
        from start: Int = 0,
        into expected: inout Contents
    ) async throws {
        for index in start..<(start + count) {
            let stream = index.isMultiple(of: 3) ? "long" : "s\(index % 8)"
            let batch = (0...(index % 4)).map { payload(index * 10 + $0) }
            let version = UInt64(expected.events[stream]?.count ?? 0)
            _ = try await store.append(batch, to: stream, expecting: version)
            expected.events[stream, default: []] += batch
            if index % 50 == 49 {
                let snapshot = Snapshot(
                    stream: stream,
                    version: version + UInt64(batch.count),
                    payload: [UInt8(index % 256)]
                )
                try await store.save(snapshot)
                expected.snapshots[stream] = snapshot
            }
        }
    }

    /// What `store` holds of the streams `expected` names.
    static func contents(of store: FileEventStore, like expected: Contents) async throws -> Contents {
        var found = Contents()
        for stream in expected.events.keys {
            found.events[stream] = try await store.read(stream, after: 0, limit: 100_000).map(\.payload)
            #expect(try await store.version(of: stream) == UInt64(found.events[stream]?.count ?? 0))
            found.snapshots[stream] = try await store.latestSnapshot(of: stream)
        }
        return found
    }

    static func open(
        _ directory: TemporaryDirectory,
        checkpoint: Bool = true,
        readOnly: Bool = false
    ) throws
        -> FileEventStore
    {
        try FileEventStore(
            directory: directory.path,
            options: .init(segmentBytes: 16_384, readOnly: readOnly, indexCheckpoint: checkpoint)
        )
    }

    static func logBytes(in directory: TemporaryDirectory) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("segment-") }
            .reduce(0) { $0 + (try directory.size(of: $1)) }
    }

    @Test func aClosedStoreOpensFromItsCheckpointWithTheIndexAWholeReadBuilds() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try Self.open(directory)
        try await Self.fill(store, batches: 1_200, into: &expected)
        await store.close()
        #expect(FileManager.default.fileExists(atPath: directory.path + "/store.index"))
        let logged = try Self.logBytes(in: directory)

        let whole = try Self.open(directory, checkpoint: false, readOnly: true)
        #expect(whole.opening.checkpoint == .none)
        #expect(try await Self.contents(of: whole, like: expected) == expected)

        let reopened = try Self.open(directory)
        #expect(reopened.opening.segments > 3)
        #expect(reopened.opening.checkpoint == .used(events: whole.opening.events, skippedBytes: logged))
        #expect(reopened.opening.streams == whole.opening.streams)
        #expect(reopened.opening.events == whole.opening.events)
        #expect(try await Self.contents(of: reopened, like: expected) == expected)
        // Reads from the middle of the long stream start at the checkpoints the index keeps.
        let middle = try await reopened.read("long", after: 300, limit: 5).map(\.payload)
        #expect(middle == Array(try #require(expected.events["long"])[300..<305]))
        // Appends go on from the checkpoint's versions.
        let version = UInt64(expected.events["s1"]?.count ?? 0)
        await #expect(throws: EventStoreError.self) {
            _ = try await reopened.append([[1]], to: "s1", expecting: version - 1)
        }
        #expect(try await reopened.append([[1]], to: "s1", expecting: version) == version + 1)
        await reopened.close()
    }

    @Test func theLogWrittenAfterTheCheckpointIsReadAfterACrash() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try Self.open(directory)
        try await Self.fill(store, batches: 600, into: &expected)
        await store.close()
        let covered = try Self.logBytes(in: directory)
        weak var dropped: FileEventStore?
        do {
            // Reopened from the checkpoint, written to, and dropped without a close: a crash.
            let crashed = try Self.open(directory)
            dropped = crashed
            try await Self.fill(crashed, batches: 700, from: 600, into: &expected)
        }
        try await Self.waitUntil("the dropped store is gone") { dropped == nil }
        let reopened = try await Self.openOnceReleased(directory)
        guard case .used(_, let skipped) = reopened.opening.checkpoint else {
            Issue.record("the checkpoint was not used: \(reopened.opening.checkpoint)")
            return
        }
        // The close's checkpoint or a newer one, written when a log file was sealed.
        #expect(skipped >= covered)
        #expect(try await Self.contents(of: reopened, like: expected) == expected)
        await reopened.close()
        let whole = try Self.open(directory, checkpoint: false)
        #expect(try await Self.contents(of: whole, like: expected) == expected)
        await whole.close()
    }

    @Test func aStoreThatNeverClosesWritesACheckpointWhenItSealsALogFile() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        weak var dropped: FileEventStore?
        do {
            let store = try Self.open(directory)
            dropped = store
            try await Self.fill(store, batches: 1_500, into: &expected)
            // Written in the background: wait for it.
            try await Self.waitUntil("a checkpoint is written") {
                FileManager.default.fileExists(atPath: directory.path + "/store.index")
            }
        }
        // The writer lets go of the store when it has finished its last batch.
        try await Self.waitUntil("the dropped store is gone") { dropped == nil }
        let reopened = try await Self.openOnceReleased(directory)
        guard case .used(let events, let skipped) = reopened.opening.checkpoint else {
            Issue.record("the checkpoint was not used: \(reopened.opening.checkpoint)")
            return
        }
        #expect(events > 0 && events < reopened.opening.events)
        let logged = try Self.logBytes(in: directory)
        #expect(skipped > 0 && skipped < logged)
        #expect(try await Self.contents(of: reopened, like: expected) == expected)
        await reopened.close()
    }

    @Test func aDamagedCheckpointIsRefusedAndTheWholeLogRead() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try Self.open(directory)
        try await Self.fill(store, batches: 300, into: &expected)
        await store.close()
        let checkpoint = try directory.contents(of: "store.index")
        var damages: [(String, [UInt8])] = [
            ("cut in half", Array(checkpoint.prefix(checkpoint.count / 2))),
            ("empty", []),
            ("its trailer gone", Array(checkpoint.dropLast(12))),
        ]
        for offset in [0, 4, 5, 13, 30, checkpoint.count / 2, checkpoint.count - 13, checkpoint.count - 1] {
            var flipped = checkpoint
            flipped[offset] ^= 0x10
            damages.append(("a bit flipped at \(offset)", flipped))
        }
        for (damage, bytes) in damages {
            try directory.write(bytes, to: "store.index")
            // A reader says why and changes nothing.
            let reader = try Self.open(directory, readOnly: true)
            guard case .refused(let reason) = reader.opening.checkpoint else {
                Issue.record("\(damage): used \(reader.opening.checkpoint)")
                continue
            }
            #expect(!reason.isEmpty)
            #expect(try await Self.contents(of: reader, like: expected) == expected, "\(damage)")
            #expect(try directory.contents(of: "store.index") == bytes, "\(damage)")
            // A writer removes it; its close writes a good one.
            let writer = try Self.open(directory)
            #expect(!FileManager.default.fileExists(atPath: directory.path + "/store.index"), "\(damage)")
            await writer.close()
            #expect(try directory.contents(of: "store.index") == checkpoint, "\(damage)")
        }
    }

    @Test func aCheckpointWhoseEntriesDoNotFitItsLogIsRefusedEvenWithAGoodChecksum() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try Self.open(directory)
        try await Self.fill(store, batches: 200, into: &expected)
        await store.close()
        let checkpoint = try directory.contents(of: "store.index")
        /// `body` changed as `change` says, with a checksum and length that fit it.
        func resealed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var body = Array(checkpoint.dropLast(12))
            change(&body)
            var bytes = body
            withUnsafeBytes(of: CRC32.checksum(body).littleEndian) { bytes += $0 }
            withUnsafeBytes(of: UInt64(body.count).littleEndian) { bytes += $0 }
            return bytes
        }
        // The first stream's entry: after the header (26 bytes and 12 per log file) its name's length,
        // its name, its version, then where its last record is.
        let files = Int(checkpoint[22]) | Int(checkpoint[23]) << 8
        let entry = 26 + 12 * files
        let nameLength = Int(checkpoint[entry]) | Int(checkpoint[entry + 1]) << 8
        let version = entry + 4 + nameLength
        let tail = version + 8
        let cases: [(String, [UInt8])] = [
            ("a last record past the end of its log file", resealed { $0[tail + 4] = 0xFF }),
            ("a last record in a log file it does not cover", resealed { $0[tail + 7] = 0x7F }),
            ("a version of 2^62 and more", resealed { $0[version + 7] = 0x40 }),
            ("one event more than its streams hold", resealed { $0[6] &+= 1 }),
            ("a stream fewer than it says", resealed { $0[14] &+= 1 }),
            ("a log file's committed length past its end", resealed { $0[26] &+= 1 }),
            ("another format", resealed { $0[4] = 9 }),
            ("an entry cut short", resealed { $0.removeLast(3) }),
        ]
        for (damage, bytes) in cases {
            try directory.write(bytes, to: "store.index")
            let reader = try Self.open(directory, readOnly: true)
            guard case .refused = reader.opening.checkpoint else {
                Issue.record("\(damage): used \(reader.opening.checkpoint)")
                continue
            }
            #expect(try await Self.contents(of: reader, like: expected) == expected, "\(damage)")
        }
    }

    @Test func aStoreOpenedToWriteWithoutItsCheckpointRemovesIt() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try Self.open(directory)
        try await Self.fill(store, batches: 100, into: &expected)
        await store.close()
        // Written to without it, the log could change under it: it goes, and the close writes a new one.
        let writer = try Self.open(directory, checkpoint: false)
        #expect(!FileManager.default.fileExists(atPath: directory.path + "/store.index"))
        try await Self.fill(writer, batches: 50, from: 100, into: &expected)
        await writer.close()
        // Closing twice does nothing more.
        await writer.close()
        let reopened = try Self.open(directory)
        guard case .used = reopened.opening.checkpoint else {
            Issue.record("the checkpoint was not used: \(reopened.opening.checkpoint)")
            return
        }
        #expect(try await Self.contents(of: reopened, like: expected) == expected)
        await reopened.close()
    }

    /// Single bits flipped at random in a log file a checkpoint covers, before the last 4 KiB its
    /// fingerprint reads: the store opens from the checkpoint, and every read returns the acknowledged
    /// events or fails naming damage, never fewer or other events.
    @Test func randomFlipsUnderACheckpointAreFoundByReads() async throws {
        let directory = try TemporaryDirectory(in: FileStoreLossTests.fastTemporary)
        var expected = Contents()
        let store = try FileEventStore(directory: directory.path)
        try await Self.fill(store, batches: 600, into: &expected)
        await store.close()
        let names = ["segment-00000000.log", "store.manifest", "store.index"]
        let original = try names.map { try directory.contents(of: $0) }
        let log = original[0]
        #expect(log.count > 5 * Self.fingerprint)
        var generator = SplitMix(state: 28)
        var failedReads = 0
        for trial in 0..<300 {
            var damaged = log
            let bit = Int(generator.next() % UInt64((log.count - Self.fingerprint) * 8))
            damaged[bit / 8] ^= UInt8(1 << (bit % 8))
            let copy = try TemporaryDirectory(in: FileStoreLossTests.fastTemporary)
            try copy.write(damaged, to: names[0])
            for index in 1..<names.count { try copy.write(original[index], to: names[index]) }
            let reopened = try FileEventStore(directory: copy.path)
            guard case .used = reopened.opening.checkpoint else {
                Issue.record("trial \(trial): the checkpoint was not used")
                continue
            }
            for (stream, events) in expected.events {
                do {
                    let found = try await reopened.read(stream, after: 0, limit: 100_000).map(\.payload)
                    #expect(found == events, "trial \(trial): bit \(bit) of the log")
                } catch let error as EventStoreError {
                    guard case .corrupted = error.kind else {
                        Issue.record("trial \(trial): \(error)")
                        continue
                    }
                    failedReads += 1
                }
            }
            await reopened.close()
        }
        // Most flips land in a record some stream's read walks through.
        #expect(failedReads > 100)
    }

    @Test func anotherStoresCheckpointIsRefused() async throws {
        // Two stores of the same shape (the same appends, one byte different in each event): their log
        // files have the same lengths, but not the same bytes.
        var expected = Contents()
        var other = Contents()
        let first = try TemporaryDirectory()
        let second = try TemporaryDirectory()
        let store = try Self.open(first)
        try await Self.fill(store, batches: 300, into: &expected)
        await store.close()
        let otherStore = try Self.open(second)
        for index in 0..<300 {
            let stream = index.isMultiple(of: 3) ? "long" : "s\(index % 8)"
            let batch = (0...(index % 4)).map { Self.payload(index * 10 + $0).map { $0 == 0x65 ? 0x45 : $0 } }
            let version = UInt64(other.events[stream]?.count ?? 0)
            _ = try await otherStore.append(batch, to: stream, expecting: version)
            other.events[stream, default: []] += batch
            if index % 50 == 49 {
                try await otherStore.save(
                    Snapshot(stream: stream, version: version + UInt64(batch.count), payload: [UInt8(index % 256)])
                )
            }
        }
        await otherStore.close()
        #expect(try Self.logBytes(in: first) == (try Self.logBytes(in: second)))
        try second.write(try first.contents(of: "store.index"), to: "store.index")
        let reopened = try Self.open(second)
        guard case .refused(let reason) = reopened.opening.checkpoint else {
            Issue.record("used \(reopened.opening.checkpoint)")
            return
        }
        #expect(reason.contains("does not hold the bytes it covers"))
        #expect(try await Self.contents(of: reopened, like: other).events == other.events)
        await reopened.close()
    }

    @Test func damageInTheLogACheckpointCoversIsFoundWhenTheRecordIsRead() async throws {
        let directory = try TemporaryDirectory()
        var expected = Contents()
        let store = try FileEventStore(directory: directory.path)
        try await Self.fill(store, batches: 400, into: &expected)
        await store.close()
        // The first record (of 'long'), far before the last 4 KiB of the file the checkpoint checks.
        #expect(try directory.size(of: "segment-00000000.log") > 3 * IndexCheckpointTests.fingerprint)
        try directory.flipByte(at: 20, of: "segment-00000000.log")

        // A whole read refuses the store.
        #expect(throws: EventStoreError.self) {
            try FileEventStore(directory: directory.path, options: .init(readOnly: true, indexCheckpoint: false))
        }
        // From the checkpoint, the store opens, and a read of the damaged record fails naming it.
        let reopened = try FileEventStore(directory: directory.path)
        guard case .used = reopened.opening.checkpoint else {
            Issue.record("the checkpoint was not used: \(reopened.opening.checkpoint)")
            return
        }
        await #expect {
            _ = try await reopened.read("long", after: 0, limit: 10)
        } throws: { error in
            guard let error = error as? EventStoreError, case .corrupted(let location, _) = error.kind else {
                return false
            }
            return location.hasSuffix("segment-00000000.log at offset 0")
        }
        // Later events of the same stream, and other streams, still read.
        let later = try await reopened.read("long", after: 100, limit: 3).map(\.payload)
        #expect(later == Array(try #require(expected.events["long"])[100..<103]))
        #expect(try await reopened.read("s1", after: 0, limit: 1_000).map(\.payload) == expected.events["s1"])
        await reopened.close()
    }

    /// Waits for `condition` (a hang guard of two minutes, not a timing).
    /// Opens `directory`, where a store was dropped: its weak reference is cleared as its deinit begins,
    /// on the thread that let go of it last, and the deinit releases the directory's locks a moment
    /// later. Until then an open is refused as `unavailable`: it is tried again.
    static func openOnceReleased(_ directory: TemporaryDirectory) async throws -> FileEventStore {
        let deadline = ContinuousClock.now + .seconds(120)
        while true {
            do {
                return try open(directory)
            } catch let error as EventStoreError {
                guard case .unavailable = error.kind, ContinuousClock.now < deadline else { throw error }
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    static func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while !condition() {
            try #require(ContinuousClock.now < deadline, "waited in vain until \(what)")
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// The bytes at the end of each covered log file a checkpoint checks.
    static let fingerprint = 4_096
}
