import Foundation
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct FileEventStoreTests {
    static func payload(_ number: Int) -> [UInt8] { Array("event \(number)".utf8) }

    @Test func passesTheConformanceSuite() async throws {
        let parent = try TemporaryDirectory()
        let counter = Locked(0)
        let stores = Locked<[FileEventStore]>([])
        let failures = await EventStoreConformance(scale: InMemoryEventStoreTests.scale, durability: Self.durability) {
            let number = counter.withLock { count in
                count += 1
                return count
            }
            let store = try FileEventStore(directory: parent.path + "/store-\(number)")
            stores.withLock { $0.append(store) }
            return store
        }
        .run()
        #expect(failures.isEmpty)
        for store in stores.withLock({ $0 }) { await store.close() }
    }

    /// What the conformance suite may do to a file store: close it, damage its files, open it again.
    static let durability = EventStoreConformance.Durability(
        reopen: { store in try await reopen(store) { _ in } },
        tearTail: { store in
            try await reopen(store) { log in
                // The header of a record whose payload never made it to the disk.
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
                try handle.seekToEnd()
                try handle.write(contentsOf: Data([40, 0, 0, 0, 1, 2, 3, 4, 1]))
                try handle.close()
            }
        },
        corruptMiddle: { store in
            try await reopen(store) { log in
                var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: log)))
                bytes[RecordFrame.headerSize + 2] ^= 0xFF
                try Data(bytes).write(to: URL(fileURLWithPath: log))
            }
        }
    )

    /// Closes a file store, changes its first log file with `damage`, and opens it again.
    static func reopen(
        _ store: any EventStore,
        damage: @Sendable (String) throws -> Void
    ) async throws -> any EventStore {
        guard let store = store as? FileEventStore else { throw CocoaError(.featureUnsupported) }
        await store.close()
        try damage(store.directory + "/segment-00000000.log")
        return try FileEventStore(directory: store.directory)
    }

    @Test func whatWasAcknowledgedIsThereAfterReopening() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        #expect(store.opening == .init(segments: 1, streams: 0, events: 0, truncated: nil))
        _ = try await store.append((1...3).map(Self.payload), to: "a", expecting: 0)
        _ = try await store.append([Self.payload(4)], to: "b", expecting: 0)
        _ = try await store.append([Self.payload(5)], to: "a", expecting: 3)
        try await store.save(Snapshot(stream: "a", version: 3, payload: [3]))
        await store.close()

        let reopened = try FileEventStore(directory: directory.path)
        // The index comes from the checkpoint the close wrote, which covers the whole log.
        let logged = try directory.contents(of: "segment-00000000.log").count
        #expect(
            reopened.opening
                == .init(
                    segments: 1,
                    streams: 2,
                    events: 5,
                    truncated: nil,
                    checkpoint: .used(events: 5, skippedBytes: logged)
                )
        )
        #expect(try await reopened.read("a", after: 0, limit: 10).map(\.payload) == [1, 2, 3, 5].map(Self.payload))
        #expect(try await reopened.version(of: "b") == 1)
        #expect(try await reopened.latestSnapshot(of: "a") == Snapshot(stream: "a", version: 3, payload: [3]))
        // The version check holds across a reopen too.
        await #expect(throws: EventStoreError(.versionConflict(expected: 1, actual: 4), stream: "a")) {
            try await reopened.append([Self.payload(6)], to: "a", expecting: 1)
        }
        await reopened.close()
    }

    @Test func aSecondStoreOnTheSameDirectoryIsRefusedUntilTheFirstCloses() async throws {
        let directory = try TemporaryDirectory()
        let first = try FileEventStore(directory: directory.path)
        do {
            _ = try FileEventStore(directory: directory.path)
            Issue.record("a second store opened a directory in use")
        } catch {
            #expect(
                error.kind
                    == .unavailable(
                        reason: "\(directory.path) is in use by process \(getpid()) "
                            + "(lock file \(directory.path)/store.lock); one store per directory"
                    )
            )
        }
        await first.close()
        await #expect(throws: EventStoreError(.unavailable(reason: "the store is closed"), stream: "a")) {
            try await first.append([[1]], to: "a", expecting: 0)
        }
        let second = try FileEventStore(directory: directory.path)
        #expect(try await second.version(of: "a") == 0)
        await second.close()
    }

    /// A crash can stop the last write at any byte: reopening cuts the unfinished record, reports it,
    /// keeps every record before it, and the store writes on after it.
    @Test func everyCutOfTheLastRecordIsATruncatedTail() async throws {
        let directory = try TemporaryDirectory()
        let log = directory.path + "/segment-00000000.log"
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        let good = store.statistics.bytes
        // The process dies here: its manifest is the one it wrote when it opened.
        let manifest = try directory.contents(of: "store.manifest")
        _ = try await store.append([Self.payload(2), Self.payload(3)], to: "s", expecting: 1)
        await store.close()
        try directory.write(manifest, to: "store.manifest")
        let whole = try [UInt8](Data(contentsOf: URL(fileURLWithPath: log)))
        for cut in (good + 1)..<whole.count {
            try Data(whole.prefix(cut)).write(to: URL(fileURLWithPath: log))
            let reopened = try FileEventStore(directory: directory.path)
            let expected = FileEventStore.TruncatedTail(file: log, offset: good, bytes: cut - good)
            #expect(reopened.opening.truncated == expected, "cut at \(cut)")
            #expect(try await reopened.read("s", after: 0, limit: 10).map(\.payload) == [Self.payload(1)])
            #expect(try directory.size(of: "segment-00000000.log") == good)
            await reopened.close()
        }
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated == nil)
        #expect(try await reopened.append([Self.payload(2)], to: "s", expecting: 1) == 2)
        await reopened.close()
    }

    @Test func zerosAfterTheLastCommitAreSpaceWrittenAheadAndAreUsedNext() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        // While it runs, the last log file is zero-filled ahead of its records.
        let good = store.statistics.bytes
        #expect(try directory.size(of: "segment-00000000.log") > good)
        #expect(try directory.contents(of: "segment-00000000.log")[good...].allSatisfy { $0 == 0 })
        await store.close()
        // A closed store's file ends at its last commit; a crashed one's keeps its zeros.
        #expect(try directory.size(of: "segment-00000000.log") == good)
        try directory.appendBytes([UInt8](repeating: 0, count: 4_096), to: "segment-00000000.log")
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated == nil)
        #expect(try await reopened.version(of: "s") == 1)
        // The next records overwrite the zeros, from the end of the last commit.
        #expect(try await reopened.append([Self.payload(2)], to: "s", expecting: 1) == 2)
        let grown = good + reopened.statistics.bytes
        await reopened.close()
        #expect(try directory.size(of: "segment-00000000.log") == grown)
        let again = try FileEventStore(directory: directory.path)
        #expect(again.opening.truncated == nil && again.opening.events == 2)
        #expect(try await again.read("s", after: 0, limit: 10).map(\.payload) == [Self.payload(1), Self.payload(2)])
        await again.close()
    }

    @Test func recordsWithNoCommitBeforeTheZerosAreStillAnUnfinishedWrite() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        await store.close()
        let good = try directory.size(of: "segment-00000000.log")
        // Part of a record whose commit never came, then the zeros written ahead of it.
        let orphan: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8, 9]
        try directory.appendBytes(orphan + [UInt8](repeating: 0, count: 4_096), to: "segment-00000000.log")
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated?.offset == good)
        #expect(reopened.opening.truncated?.bytes == orphan.count + 4_096)
        #expect(try await reopened.version(of: "s") == 1)
        await reopened.close()
    }

    @Test func aSealedLogFileEndsAtItsLastCommitAndZerosAfterItAreDamage() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 300))
        for version in 0..<12 {
            _ = try await store.append([Self.payload(version + 1)], to: "s", expecting: UInt64(version))
        }
        // Rolled once past 300 bytes (records are 62 bytes): zero-filled 300 bytes ahead, cut when sealed.
        let sealed = try directory.size(of: "segment-00000000.log")
        #expect(sealed >= 300 && sealed < 362, "a sealed log file ends at its last commit")
        await store.close()
        // The store cuts a file before it starts the next, so zeros after a sealed file's last commit
        // were never written by it.
        try directory.appendBytes([UInt8](repeating: 0, count: 300), to: "segment-00000000.log")
        #expect(throws: EventStoreError.self) {
            try FileEventStore(directory: directory.path, options: .init(segmentBytes: 300))
        }
    }

    @Test func corruptionBeforeTheTailIsAnErrorNamingFileAndOffset() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        let second = store.statistics.bytes
        _ = try await store.append([Self.payload(2)], to: "s", expecting: 1)
        _ = try await store.append([Self.payload(3)], to: "s", expecting: 2)
        await store.close()
        let before = try directory.size(of: "segment-00000000.log")
        try directory.flipByte(at: second + RecordFrame.headerSize + 3, of: "segment-00000000.log")
        do {
            _ = try FileEventStore(directory: directory.path)
            Issue.record("a damaged log opened")
        } catch {
            #expect(
                error.kind
                    == .corrupted(
                        location: "\(directory.path)/segment-00000000.log at offset \(second)",
                        reason: "the checksum does not match the 37-byte payload"
                    )
            )
        }
        #expect(try directory.size(of: "segment-00000000.log") == before)
    }

    /// One flipped bit in a record's length makes it run past the end of the file: with committed records
    /// after it, that is damage to acknowledged data, not an unfinished write; nothing is cut.
    @Test func aDamagedLengthWithCommitsAfterItIsCorruptionAndNothingIsCut() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        for batch in 0..<20 {
            _ = try await store.append(
                (0..<10).map { Self.payload(batch * 10 + $0) },
                to: "s",
                expecting: UInt64(batch * 10)
            )
        }
        await store.close()
        let log = directory.path + "/segment-00000000.log"
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: log)))
        // The first frame at or past a third of the file.
        var offset = 0
        while offset < bytes.count / 3, case .record(_, let next) = RecordFrame.read(bytes, at: offset) {
            offset = next
        }
        var damaged = bytes
        damaged[offset + 2] ^= 1  // bit 16 of the length
        try Data(damaged).write(to: URL(fileURLWithPath: log))
        do {
            _ = try FileEventStore(directory: directory.path)
            Issue.record("a store with a damaged length opened")
        } catch {
            #expect(
                error.kind
                    == .corrupted(
                        location: "\(log) at offset \(offset)",
                        reason: "a record longer than what follows it, with committed records after it"
                    )
            )
        }
        #expect(try directory.size(of: "segment-00000000.log") == bytes.count)
        // Put back, every acknowledged event is there.
        try Data(bytes).write(to: URL(fileURLWithPath: log))
        let reopened = try FileEventStore(directory: directory.path)
        #expect(try await reopened.version(of: "s") == 200)
        await reopened.close()
    }

    /// Deleting the lock file of a store in use does not let a second writer in (issue 27, item 2).
    @Test func aDeletedLockFileAdmitsNoSecondWriter() async throws {
        let directory = try TemporaryDirectory()
        let first = try FileEventStore(directory: directory.path)
        _ = try await first.append([Self.payload(1)], to: "s", expecting: 0)
        #expect(unlink(directory.path + "/store.lock") == 0)
        do {
            let second = try FileEventStore(directory: directory.path)
            await second.close()
            Issue.record("a second writer opened the store")
        } catch {
            guard case .unavailable(let reason) = error.kind else { throw error }
            #expect(reason.contains("is in use by"))
        }
        #expect(try await first.append([Self.payload(2)], to: "s", expecting: 1) == 2)
        await first.close()
        let reopened = try FileEventStore(directory: directory.path)
        #expect(try await reopened.version(of: "s") == 2)
        await reopened.close()
    }

    @Test func aRecordOutOfSequenceIsCorruption() async throws {
        let directory = try TemporaryDirectory()
        // Version 2 of a stream with no version 1: well framed, but not a history this store wrote.
        let record: [UInt8] =
            [1] + le(UInt32(1)) + Array("s".utf8) + le(UInt64(2)) + le(UInt64.max) + le(UInt32(1)) + le(UInt32(1)) + [7]
        let commit: [UInt8] = [3] + le(UInt64(0))
        try directory.appendBytes(RecordFrame.encode(record) + RecordFrame.encode(commit), to: "segment-00000000.log")
        #expect(
            throws: EventStoreError(
                .corrupted(
                    location: "\(directory.path)/segment-00000000.log at offset 0",
                    reason: "events of 's' from version 2 follow version 0"
                )
            )
        ) { try FileEventStore(directory: directory.path) }
    }

    /// A crash during a group commit can leave any part of the unsynced batch on disk: a zero-filled
    /// record followed by an intact one, with no commit after them, is an unfinished write, cut.
    @Test func aZeroedRecordInsideTheLastBatchIsATornTail() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        await store.close()
        let good = try directory.size(of: "segment-00000000.log")
        func record(_ stream: String, _ byte: UInt8) -> [UInt8] {
            RecordFrame.encode(
                [1] + le(UInt32(1)) + Array(stream.utf8) + le(UInt64(1)) + le(UInt64.max) + le(UInt32(1))
                    + le(UInt32(1)) + [byte]
            )
        }
        let first = record("a", 7)
        try directory.appendBytes(
            [UInt8](repeating: 0, count: first.count) + record("b", 8),
            to: "segment-00000000.log"
        )
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated?.offset == good)
        #expect(try await reopened.version(of: "b") == 0)
        #expect(try await reopened.version(of: "s") == 1)
        await reopened.close()
    }

    /// The file is zero-filled ahead, so a batch's pages can reach the disk in any order: its commit
    /// record may be there while an earlier page still holds zeros. Nothing of that batch was
    /// acknowledged (its sync never returned), so it is an unfinished write; the same damage in a batch
    /// with another committed after it is corruption.
    @Test func aBatchTornOverZerosWrittenAheadIsUnfinishedEvenWithItsCommitOnDisk() async throws {
        func record(_ stream: String, _ byte: UInt8) -> [UInt8] {
            RecordFrame.encode(
                [1] + le(UInt32(1)) + Array(stream.utf8) + le(UInt64(1)) + le(UInt64.max) + le(UInt32(1))
                    + le(UInt32(1)) + [byte]
            )
        }
        func commit(from start: Int) -> [UInt8] { RecordFrame.encode([3] + le(UInt64(start))) }
        for anotherBatchAfter in [false, true] {
            let directory = try TemporaryDirectory()
            let store = try FileEventStore(directory: directory.path)
            _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
            await store.close()
            let good = try directory.size(of: "segment-00000000.log")
            let torn = [UInt8](repeating: 0, count: record("a", 7).count) + record("b", 8) + commit(from: good)
            var bytes = torn
            if anotherBatchAfter { bytes += record("c", 9) + commit(from: good + torn.count) }
            try directory.appendBytes(bytes + [UInt8](repeating: 0, count: 4_096), to: "segment-00000000.log")
            if anotherBatchAfter {
                #expect(throws: EventStoreError.self) { try FileEventStore(directory: directory.path) }
                continue
            }
            let reopened = try FileEventStore(directory: directory.path)
            #expect(reopened.opening.truncated?.offset == good)
            #expect(try await reopened.version(of: "b") == 0)
            #expect(try await reopened.version(of: "s") == 1)
            await reopened.close()
        }
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    /// A failed sync breaks the store: what was queued behind that write fails at once, not at close.
    @Test(.timeLimit(.minutes(10)))
    func appendsQueuedBehindAFailedSyncFailAtOnce() async throws {
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        io.counts.withLock { $0.holdFirstWrite = true }
        let store = try FileEventStore(directory: directory.path, io: io)
        io.counts.withLock { $0.failSync = EIO }
        let held = Task { try await store.append([[1]], to: "s", expecting: 0) }
        await eventually("the first write is under way") { io.counts.withLock { $0.writes } == 1 }
        let queued = Task { try await store.append([[2]], to: "t", expecting: 0) }
        await eventually("one queued behind it") { store.queuedOperations == 1 }
        io.release()
        await #expect(throws: EventStoreError.self) { try await held.value }
        do {
            _ = try await queued.value
            Issue.record("an append queued behind a failed sync was written")
        } catch let error as EventStoreError {
            if case .unavailable = error.kind, error.stream == "t" {} else { Issue.record("unexpected \(error)") }
        }
        await store.close()
    }

    /// A version conflict stands even when the write of its batch fails; only what would have been
    /// written gets the write's error.
    @Test func aConflictInABatchWhoseWriteFailsIsStillAConflict() async throws {
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        io.counts.withLock { $0.holdFirstWrite = true }
        let store = try FileEventStore(directory: directory.path, io: io)
        let held = Task { try await store.append([[1]], to: "s", expecting: 0) }
        await eventually("the first write is under way") { io.counts.withLock { $0.writes } == 1 }
        io.counts.withLock { $0.failWrite = (afterBytes: 3, code: ENOSPC) }
        let other = Task { try await store.append([[2]], to: "t", expecting: 0) }
        let stale = Task { try await store.append([[3]], to: "s", expecting: 0) }
        await eventually("both queued behind it") { store.queuedOperations == 2 }
        io.release()
        #expect(try await held.value == 1)
        await #expect(throws: EventStoreError(.versionConflict(expected: 0, actual: 1), stream: "s")) {
            try await stale.value
        }
        let write = "write to \(directory.path)/segment-00000000.log"
        await #expect(throws: EventStoreError(.io(code: ENOSPC, operation: write), stream: "t")) {
            try await other.value
        }
        await store.close()
    }

    @Test func logFilesRollAndAMissingOneIsNamed() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 200))
        for version in 0..<40 {
            _ = try await store.append(
                [Self.payload(version + 1)],
                to: "s\(version % 3)",
                expecting: UInt64(version / 3)
            )
        }
        let all = try await store.read("s1", after: 0, limit: 100).map(\.payload)
        #expect(all == stride(from: 1, to: 40, by: 3).map { Self.payload($0 + 1) })
        await store.close()
        let reopened = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 200))
        #expect(reopened.opening.segments > 5)
        #expect(reopened.opening.events == 40)
        #expect(try await reopened.read("s1", after: 5, limit: 2).map(\.version) == [6, 7])
        await reopened.close()

        try FileManager.default.removeItem(atPath: directory.path + "/segment-00000002.log")
        #expect(
            throws: EventStoreError(
                .corrupted(
                    location: directory.path,
                    reason: "\(directory.path)/segment-00000002.log is missing"
                )
            )
        ) { try FileEventStore(directory: directory.path) }
    }

    @Test func anUnfinishedRecordInALogFileThatIsNotTheLastIsCorruption() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 10))
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        _ = try await store.append([Self.payload(2)], to: "s", expecting: 1)
        await store.close()
        try directory.appendBytes([1, 2, 3], to: "segment-00000000.log")
        #expect(throws: EventStoreError.self) { try FileEventStore(directory: directory.path) }
    }

    @Test func aDirectoryThatIsAFileIsAClearError() throws {
        let directory = try TemporaryDirectory()
        try directory.appendBytes([1], to: "file")
        #expect(throws: EventStoreError(.io(code: ENOTDIR, operation: "open \(directory.path)/file"))) {
            try FileEventStore(directory: directory.path + "/file")
        }
    }

    @Test func aBatchPastTheRecordLimitIsRefused() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        let huge = [UInt8](repeating: 1, count: RecordFrame.maximumPayload)
        await #expect(throws: EventStoreError.self) { try await store.append([huge], to: "s", expecting: 0) }
        #expect(try await store.version(of: "s") == 0)
        await store.close()
    }

    /// Appends that arrive while a write is under way share the next write and its `fdatasync`.
    @Test func concurrentAppendsShareSyncs() async throws {
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        let store = try FileEventStore(directory: directory.path, io: io)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for stream in 0..<500 {
                group.addTask { _ = try await store.append([Self.payload(stream)], to: "s\(stream)", expecting: 0) }
            }
            try await group.waitForAll()
        }
        let syncs = io.counts.withLock { $0.syncs }
        #expect(syncs < 500)
        for stream in [0, 250, 499] { #expect(try await store.version(of: "s\(stream)") == 1) }
        await store.close()
    }

    /// A disk that fills mid-write: the half record is cut, the append fails with ENOSPC, and the next
    /// append (once there is room) lands right after the last good record.
    @Test func aFailedWriteLeavesNoHalfRecordAndLosesNothingAcknowledged() async throws {
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        let store = try FileEventStore(directory: directory.path, io: io)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        let good = store.statistics.bytes
        io.counts.withLock { $0.failWrite = (afterBytes: 5, code: ENOSPC) }
        await #expect(
            throws: EventStoreError(
                .io(code: ENOSPC, operation: "write to \(directory.path)/segment-00000000.log"),
                stream: "s"
            )
        ) {
            try await store.append([Self.payload(2)], to: "s", expecting: 1)
        }
        #expect(try directory.size(of: "segment-00000000.log") == good)
        #expect(try await store.version(of: "s") == 1)
        #expect(try await store.append([Self.payload(3)], to: "s", expecting: 1) == 2)
        await store.close()
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated == nil)
        #expect(try await reopened.read("s", after: 0, limit: 9).map(\.payload) == [Self.payload(1), Self.payload(3)])
        await reopened.close()
    }

    /// After `fdatasync` fails (EIO) the store cannot know what reached the disk: it fails the append,
    /// cuts the record, and refuses to write until opened again; what was acknowledged stays.
    @Test func aFailedSyncStopsWritingUntilReopened() async throws {
        let directory = try TemporaryDirectory()
        let io = FaultyIO()
        let store = try FileEventStore(directory: directory.path, io: io)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        io.counts.withLock { $0.failSync = EIO }
        await #expect(
            throws: EventStoreError(
                .io(code: EIO, operation: "sync \(directory.path)/segment-00000000.log"),
                stream: "s"
            )
        ) {
            try await store.append([Self.payload(2)], to: "s", expecting: 1)
        }
        io.counts.withLock { $0.failSync = nil }
        do {
            _ = try await store.append([Self.payload(2)], to: "t", expecting: 0)
            Issue.record("a store whose sync failed wrote again")
        } catch let error as EventStoreError {
            guard case .unavailable(let reason) = error.kind else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(reason.contains("open the store at \(directory.path) again"))
        }
        #expect(try await store.read("s", after: 0, limit: 9).map(\.payload) == [Self.payload(1)])
        await store.close()
        let reopened = try FileEventStore(directory: directory.path)
        #expect(try await reopened.read("s", after: 0, limit: 9).map(\.payload) == [Self.payload(1)])
        #expect(try await reopened.append([Self.payload(2)], to: "s", expecting: 1) == 2)
        await reopened.close()
    }

    static let canMountTmpfs: Bool = {
        guard getuid() == 0, let directory = try? TemporaryDirectory() else { return false }
        defer { umount2(directory.path, Int32(MNT_DETACH)) }
        return mount("tmpfs", directory.path, "tmpfs", 0, "size=64k") == 0
    }()

    /// A real full disk: a 64 KiB tmpfs (where the machine lets a test mount one) fills up; every append
    /// that was acknowledged is there after reopening, and nothing is torn or corrupt.
    @Test(.enabled(if: canMountTmpfs, "mounting a tmpfs needs root"))
    func aFullTmpfsLosesNothingAcknowledged() async throws {
        let directory = try TemporaryDirectory()
        #expect(mount("tmpfs", directory.path, "tmpfs", 0, "size=64k") == 0)
        defer { umount2(directory.path, Int32(MNT_DETACH)) }
        let store = try FileEventStore(directory: directory.path)
        var acknowledged: UInt64 = 0
        var failure: EventStoreError?
        let big = [UInt8](repeating: 42, count: 1_000)
        while failure == nil && acknowledged < 1_000 {
            do {
                acknowledged = try await store.append([big], to: "s", expecting: acknowledged)
            } catch let error as EventStoreError {
                failure = error
            }
        }
        #expect(failure?.kind == .io(code: ENOSPC, operation: "write to \(directory.path)/segment-00000000.log"))
        #expect(acknowledged > 10)
        await store.close()
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.truncated == nil)
        #expect(reopened.opening.events == acknowledged)
        let events = try await reopened.read("s", after: 0, limit: 10_000)
        #expect(events.count == Int(acknowledged) && events.allSatisfy { $0.payload == big })
        await reopened.close()
    }
}

func le(_ value: some FixedWidthInteger) -> [UInt8] {
    withUnsafeBytes(of: value.littleEndian) { Array($0) }
}

/// A file layer that counts `fdatasync`s and fails a write or a sync when told to.
final class FaultyIO: StoreIO {
    struct Counts {
        var syncs = 0
        var writes = 0
        /// Holds the first write until `release()`.
        var holdFirstWrite = false
        /// Writes this many bytes, then fails with this code.
        var failWrite: (afterBytes: Int, code: Int32)?
        var failSync: Int32?
    }

    let counts = Locked(Counts())
    let system = SystemIO()
    let gate = DispatchSemaphore(value: 0)

    func release() {
        gate.signal()
    }

    func write(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int {
        let (hold, failure) = counts.withLock { counts -> (Bool, (afterBytes: Int, code: Int32)?) in
            counts.writes += 1
            if counts.holdFirstWrite && counts.writes == 1 { return (true, nil) }
            defer { counts.failWrite = nil }
            return (false, counts.failWrite)
        }
        if hold { gate.wait() }
        guard let failure else { return system.write(descriptor, bytes, at: offset) }
        _ = system.write(descriptor, UnsafeRawBufferPointer(rebasing: bytes.prefix(failure.afterBytes)), at: offset)
        return -Int(failure.code)
    }

    func sync(_ descriptor: Int32) -> Int32 {
        if let code = counts.withLock({ counts -> Int32? in
            counts.syncs += 1
            return counts.failSync
        }) {
            return -code
        }
        return system.sync(descriptor)
    }

    func truncate(_ descriptor: Int32, to size: Int) -> Int32 {
        system.truncate(descriptor, to: size)
    }
}

/// A directory under the system's temporary directory, removed when the value goes away.
final class TemporaryDirectory: Sendable {
    let path: String

    /// A new directory in `parent` (the system's temporary directory by default).
    init(in parent: String? = nil) throws {
        let parent = parent.map { $0 + "/" } ?? NSTemporaryDirectory()
        var template = Array((parent + "effectloop-store-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ $0.baseAddress.flatMap(mkdtemp) }) else {
            throw CocoaError(.fileWriteUnknown)
        }
        path = String(cString: made)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func size(of name: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path + "/" + name)
        return (attributes[.size] as? NSNumber)?.intValue ?? -1
    }

    func appendBytes(_ bytes: [UInt8], to name: String) throws {
        let file = path + "/" + name
        if !FileManager.default.fileExists(atPath: file) {
            _ = FileManager.default.createFile(atPath: file, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(bytes))
    }

    /// The bytes of the file `name`. Read with `read(2)`: Foundation's `Data(contentsOf:)` leaks a buffer
    /// for an empty file under LeakSanitizer.
    func contents(of name: String) throws -> [UInt8] {
        let descriptor = open(path + "/" + name, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw CocoaError(.fileReadNoSuchFile) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw CocoaError(.fileReadUnknown) }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
        }
    }

    func write(_ bytes: [UInt8], to name: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path + "/" + name))
    }

    func overwrite(_ bytes: [UInt8], at offset: Int, of name: String) throws {
        let url = URL(fileURLWithPath: path + "/" + name)
        var contents = try [UInt8](Data(contentsOf: url))
        if contents.count < offset + bytes.count {
            contents += [UInt8](repeating: 0, count: offset + bytes.count - contents.count)
        }
        contents.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        try Data(contents).write(to: url)
    }

    func flipByte(at offset: Int, of name: String) throws {
        let url = URL(fileURLWithPath: path + "/" + name)
        var bytes = try [UInt8](Data(contentsOf: url))
        bytes[offset] ^= 0xFF
        try Data(bytes).write(to: url)
    }
}

/// The file store's in-memory index: a compact open-addressing table that must find every key.
@Suite struct StreamIndexTests {
    @Test func everyStreamIsFoundAfterTheTablesGrow() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        let streams = 20_000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    for stream in stride(from: worker, to: streams, by: 8) {
                        _ = try await store.append([[UInt8(stream % 251)]], to: "stream-\(stream)", expecting: 0)
                    }
                }
            }
            try await group.waitForAll()
        }
        for stream in stride(from: 0, to: streams, by: 7) {
            #expect(try await store.version(of: "stream-\(stream)") == 1)
        }
        #expect(try await store.version(of: "stream-\(streams)") == 0)
        _ = try await store.append([[1]], to: "stream-3", expecting: 1)
        await store.close()
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.streams == streams)
        #expect(try await reopened.read("stream-3", after: 0, limit: 5).map(\.payload) == [[3], [1]])
        await reopened.close()
    }
}
