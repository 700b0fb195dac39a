import Foundation
import LoopPersistence
import LoopRuntime
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Retention and compaction in the file store: what a policy keeps reads back the same before and
/// after compaction, reopening and faults; what it does not keep is refused clearly and leaves the disk.
@Suite struct CompactionTests {
    static let policy = Retention.afterSnapshots(2)

    /// The event at `version` of `stream`: the same bytes whoever writes it.
    static func payload(_ stream: String, _ version: UInt64) -> [UInt8] {
        Array("\(stream) event \(version) ".utf8) + [UInt8](repeating: UInt8(version % 251), count: 24)
    }

    static func snapshotPayload(_ stream: String, _ version: UInt64) -> [UInt8] {
        Array("\(stream) state at \(version)".utf8)
    }

    static func open(
        _ directory: TemporaryDirectory,
        retention: Retention = policy,
        checkpoint: Bool = true,
        io: (any StoreIO)? = nil
    ) throws -> FileEventStore {
        let options = FileEventStore.Options(segmentBytes: 8_192, indexCheckpoint: checkpoint, retention: retention)
        if let io { return try FileEventStore(directory: directory.path, options: options, io: io) }
        return try FileEventStore(directory: directory.path, options: options)
    }

    /// What the test knows was acknowledged: each stream's version and its snapshots' versions.
    struct Acknowledged {
        var versions: [String: UInt64] = [:]
        var snapshots: [String: [UInt64]] = [:]

        /// The version after which `stream` keeps its events under ``policy``: the older of its latest
        /// two snapshots, or 0.
        func kept(_ stream: String) -> UInt64 {
            let list = snapshots[stream] ?? []
            return list.count >= 2 ? list[list.count - 2] : 0
        }
    }

    /// Appends `count` events one at a time over `streams` streams, round robin, with a snapshot of a
    /// stream every `every` of its events.
    static func fill(
        _ store: FileEventStore,
        events count: Int,
        streams: Int,
        snapshotEvery every: UInt64,
        prefix: String = "s",
        into acknowledged: inout Acknowledged
    ) async throws {
        for index in 0..<count {
            let stream = "\(prefix)\(index % streams)"
            let version = acknowledged.versions[stream, default: 0]
            _ = try await store.append([payload(stream, version + 1)], to: stream, expecting: version)
            acknowledged.versions[stream] = version + 1
            if (version + 1) % every == 0 {
                try await store.save(
                    Snapshot(stream: stream, version: version + 1, payload: snapshotPayload(stream, version + 1))
                )
                acknowledged.snapshots[stream, default: []].append(version + 1)
            }
        }
    }

    /// Checks that `store` holds every stream's kept events and latest snapshot, and refuses reads below
    /// what it keeps.
    static func expectKept(_ store: FileEventStore, _ acknowledged: Acknowledged) async throws {
        for (stream, version) in acknowledged.versions {
            #expect(try await store.version(of: stream) == version)
            let kept = acknowledged.kept(stream)
            let events = try await store.read(stream, after: kept, limit: 1_000_000)
            #expect(events.map(\.version) == Array((kept + 1)...max(kept + 1, version)).filter { $0 <= version })
            #expect(events.allSatisfy { $0.payload == payload(stream, $0.version) })
            if let latest = acknowledged.snapshots[stream]?.last {
                let snapshot = try await store.latestSnapshot(of: stream)
                #expect(snapshot?.version == latest && snapshot?.payload == snapshotPayload(stream, latest))
            }
            if kept > 0 {
                // Refused by the policy (the store counts the same snapshots), not for events found gone.
                do {
                    _ = try await store.read(stream, after: kept - 1, limit: 10)
                    Issue.record("\(stream): a read below what it keeps was answered")
                } catch {
                    #expect("\(error)".contains("events up to version \(kept) are not kept"), "\(error)")
                }
            }
        }
    }

    /// The bytes of the log files there now. Compaction may run by itself meanwhile: a file it removed
    /// between the listing and its size holds none of the log (it failed ci54 under the address
    /// sanitizer with "no such file").
    static func logBytes(in directory: TemporaryDirectory) throws -> Int {
        try logFiles(in: directory).reduce(0) { total, name in
            do {
                return total + (try directory.size(of: name))
            } catch  where !FileManager.default.fileExists(atPath: directory.path + "/" + name) {
                return total
            }
        }
    }

    static func logFiles(in directory: TemporaryDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("segment-") }.sorted()
    }

    @Test func compactionRemovesWhatRetentionDoesNotKeepAndEveryKeptRecordReadsBack() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        // Compaction on its own would start at the first sealed file: off here, then run by hand.
        do {
            // Gone at the end of this block, its log files' descriptors with it.
            let store = try Self.open(directory, retention: .keepAll)
            try await Self.fill(store, events: 3_000, streams: 20, snapshotEvery: 10, into: &acknowledged)
            let nothing = try await store.compact()
            #expect(nothing == FileEventStore.Compaction())
            await store.close()
        }
        let before = try Self.logBytes(in: directory)

        let compacting = try Self.open(directory)
        let done = try await compacting.compact()
        #expect(done.removedFiles > 0)
        try await Self.expectKept(compacting, acknowledged)
        // No read is under way: the removed files are closed, their space given back.
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)
        }
        #expect(!open.contains { $0.hasPrefix(directory.path) && $0.hasSuffix("(deleted)") }, "\(open)")
        // Appends and snapshots go on after compaction.
        try await Self.fill(compacting, events: 400, streams: 20, snapshotEvery: 10, into: &acknowledged)
        try await Self.expectKept(compacting, acknowledged)
        await compacting.close()
        let after = try Self.logBytes(in: directory)
        #expect(after * 4 < before, "\(after) bytes of log after compaction, \(before) before")
        #expect(try Self.logFiles(in: directory).first != "segment-00000000.log")

        // The same from the checkpoint, from a whole read, and read-only.
        for checkpoint in [true, false] {
            let reopened = try Self.open(directory, checkpoint: checkpoint)
            if checkpoint {
                guard case .used = reopened.opening.checkpoint else {
                    Issue.record("the checkpoint was not used: \(reopened.opening.checkpoint)")
                    return
                }
            }
            #expect(reopened.opening.events == acknowledged.versions.values.reduce(0, +))
            try await Self.expectKept(reopened, acknowledged)
            await reopened.close()
        }
    }

    @Test func compactionRunsByItselfAsLogFilesAreSealedAndTheLogStaysBounded() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory)
        var largest = 0
        for _ in 0..<10 {
            try await Self.fill(store, events: 600, streams: 5, snapshotEvery: 20, into: &acknowledged)
            largest = max(largest, try Self.logBytes(in: directory))
        }
        _ = try await store.compact()
        try await Self.expectKept(store, acknowledged)
        await store.close()
        // 6,000 events of about 60 bytes framed: 360 KB written; each stream keeps at most 40 events.
        #expect(largest < 120_000, "the log grew to \(largest) bytes")
        let reopened = try Self.open(directory)
        try await Self.expectKept(reopened, acknowledged)
        await reopened.close()
    }

    @Test func aStreamThatKeepsNoEventsKeepsItsVersionAndSnapshot() async throws {
        let directory = try TemporaryDirectory()
        let store = try Self.open(directory)
        var acknowledged = Acknowledged()
        try await Self.fill(store, events: 40, streams: 1, snapshotEvery: 20, into: &acknowledged)
        // Enough of another stream to seal a few files behind it.
        try await Self.fill(store, events: 600, streams: 1, snapshotEvery: 600, into: &acknowledged)
        _ = try await store.compact()
        await store.close()
        let reopened = try Self.open(directory)
        try await Self.expectKept(reopened, acknowledged)
        await reopened.close()
    }

    @Test func aLogFileLeftByACompactionThatCrashedBeforeDeletingItIsRemovedAtOpen() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory, retention: .keepAll)
        try await Self.fill(store, events: 1_000, streams: 5, snapshotEvery: 10, into: &acknowledged)
        await store.close()
        let first = try directory.contents(of: "segment-00000000.log")
        let compacting = try Self.open(directory)
        _ = try await compacting.compact()
        await compacting.close()
        // The manifest no longer lists it; a crash before the unlink leaves it in place.
        try directory.appendBytes(first, to: "segment-00000000.log")
        let reopened = try Self.open(directory)
        #expect(!(try Self.logFiles(in: directory).contains("segment-00000000.log")))
        try await Self.expectKept(reopened, acknowledged)
        await reopened.close()
    }

    @Test func aFullDiskDuringCompactionLosesNothingAndTheNextPassCompletesIt() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory, retention: .keepAll)
        try await Self.fill(store, events: 1_500, streams: 10, snapshotEvery: 10, into: &acknowledged)
        await store.close()
        let io = FaultyIO()
        let compacting = try Self.open(directory, io: io)
        io.counts.withLock { $0.failWrite = (afterBytes: 100, code: ENOSPC) }
        let before = try Self.logBytes(in: directory)
        // The first relocation's write fails: the pass stops there, having removed the files before it.
        await #expect(throws: EventStoreError.self) { _ = try await compacting.compact() }
        try await Self.expectKept(compacting, acknowledged)
        // The next pass (or the one the store started when a relocation sealed its file) finishes.
        _ = try await compacting.compact()
        #expect(try Self.logBytes(in: directory) * 4 < before)
        try await Self.expectKept(compacting, acknowledged)
        await compacting.close()
        let reopened = try Self.open(directory)
        try await Self.expectKept(reopened, acknowledged)
        await reopened.close()
    }

    @Test func aCompactedStoreOpenedToKeepEverythingReadsWhatIsLeftAndRefusesWhatIsGone() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory, retention: .keepAll)
        try await Self.fill(store, events: 1_500, streams: 3, snapshotEvery: 10, into: &acknowledged)
        await store.close()
        let compacting = try Self.open(directory)
        _ = try await compacting.compact()
        await compacting.close()
        let reopened = try Self.open(directory, retention: .keepAll)
        for (stream, version) in acknowledged.versions {
            let kept = acknowledged.kept(stream)
            #expect(try await reopened.read(stream, after: kept, limit: 1_000).count == Int(version - kept))
            await #expect(throws: EventStoreError.self) { try await reopened.read(stream, after: 0, limit: 1_000) }
        }
        await reopened.close()
    }

    @Test func streamsKeptInOldFilesAreRelocatedAgainAndAgainAndReadBackWhole() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory)
        // Quiet streams without snapshots keep every event, in the oldest file among hot streams' ones.
        try await Self.fill(store, events: 20, streams: 4, snapshotEvery: 1_000, into: &acknowledged)
        for round in 0..<4 {
            var hot = Acknowledged()
            try await Self.fill(store, events: 800, streams: 3, snapshotEvery: 10, prefix: "hot\(round)-", into: &hot)
            try await Self.expectKept(store, hot)
            _ = try await store.compact()
            try await Self.expectKept(store, acknowledged)
            // The quiet streams go on from their relocated chains.
            try await Self.fill(store, events: 4, streams: 4, snapshotEvery: 1_000, into: &acknowledged)
        }
        // About 250 events and 24 snapshots are kept, some 25 KB: what is left is at most twice that, and the
        // file being written. (3,300 events were written: 260 KB.)
        let (bytes, files) = (try Self.logBytes(in: directory), try Self.logFiles(in: directory))
        #expect(bytes < 70_000, "\(bytes) bytes in \(files)")
        try await Self.expectKept(store, acknowledged)
        await store.close()
        #expect(try Self.logFiles(in: directory).first != "segment-00000000.log")
        for checkpoint in [true, false] {
            let reopened = try Self.open(directory, checkpoint: checkpoint)
            try await Self.expectKept(reopened, acknowledged)
            await reopened.close()
        }
    }

    @Test func aWholeReadAfterCompactionKeepsTheOlderSnapshotCopiesAndCompactionGoesOn() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        var filler = Acknowledged()
        // One stream with two snapshots, the older in the first file, among a filler whose records go;
        // written keeping everything, so compaction takes the older snapshot only once the newer exists.
        let writing = try Self.open(directory, retention: .keepAll)
        try await Self.fill(writing, events: 10, streams: 1, snapshotEvery: 10, prefix: "kept", into: &acknowledged)
        try await Self.fill(writing, events: 300, streams: 3, snapshotEvery: 10, prefix: "filler", into: &filler)
        try await Self.fill(writing, events: 10, streams: 1, snapshotEvery: 10, prefix: "kept", into: &acknowledged)
        try await Self.fill(writing, events: 600, streams: 3, snapshotEvery: 10, prefix: "filler", into: &filler)
        await writing.close()
        let store = try Self.open(directory)
        _ = try await store.compact()
        await store.close()
        #expect(!(try Self.logFiles(in: directory).contains("segment-00000000.log")))
        // A crash before the new checkpoint was renamed into place: the log is read whole. The copy of
        // the older snapshot comes after the newer one there, and is kept all the same.
        try FileManager.default.removeItem(atPath: directory.path + "/store.index")
        let reopened = try Self.open(directory, checkpoint: false)
        try await Self.expectKept(reopened, acknowledged)
        try await Self.expectKept(reopened, filler)
        // Both snapshots count: the events up to the older are not kept (rather than some found gone).
        do {
            _ = try await reopened.read("kept0", after: 9, limit: 10)
            Issue.record("a read below what the stream keeps was answered")
        } catch {
            #expect("\(error)".contains("events up to version 10 are not kept"), "\(error)")
        }
        try await Self.fill(reopened, events: 900, streams: 3, snapshotEvery: 10, prefix: "more", into: &filler)
        let done = try await reopened.compact()
        try await Self.expectKept(reopened, acknowledged)
        await reopened.close()
        #expect(done.removedFiles + (try Self.logFiles(in: directory).count) > 0)
        #expect(try Self.logBytes(in: directory) < 60_000)
    }

    @Test func aStoreReopenedToKeepMoreSnapshotsThanItKeptCompactsWhatIsLeft() async throws {
        let directory = try TemporaryDirectory()
        var acknowledged = Acknowledged()
        let store = try Self.open(directory, retention: .afterSnapshots(1))
        try await Self.fill(store, events: 2_000, streams: 4, snapshotEvery: 10, into: &acknowledged)
        _ = try await store.compact()
        await store.close()
        // Three snapshots asked, fewer left: the events before the oldest left are gone, and stay so.
        let reopened = try Self.open(directory, retention: .afterSnapshots(3))
        try await Self.fill(reopened, events: 2_000, streams: 4, snapshotEvery: 10, prefix: "t", into: &acknowledged)
        _ = try await reopened.compact()
        for stream in ["t0", "t1", "t2", "t3"] {
            let kept = acknowledged.snapshots[stream].map { $0[$0.count - 3] } ?? 0
            #expect(try await reopened.read(stream, after: kept, limit: 1_000).count == Int(500 - kept))
        }
        await reopened.close()
    }
}
