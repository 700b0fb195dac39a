import Foundation
import LoopPersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What the file store acknowledged stays, or opening fails saying what is gone: damage and deleted
/// files are never taken for a torn tail, and a reader changes nothing.
@Suite struct FileStoreLossTests {
    static func payload(_ number: Int) -> [UInt8] { Array("event \(number)".utf8) }

    /// 40 events over three streams in log files of 200 bytes; returns the directory, closed.
    static func rolledStore() async throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 200))
        for version in 0..<40 {
            _ = try await store.append([payload(version + 1)], to: "s\(version % 3)", expecting: UInt64(version / 3))
        }
        await store.close()
        return directory
    }

    /// The names and bytes of every file in `directory`.
    static func files(in directory: TemporaryDirectory) throws -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            files[name] = try directory.contents(of: name)
        }
        return files
    }

    static func segments(in directory: TemporaryDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("segment-") }.sorted()
    }

    @Test func aDeletedLastLogFileIsLossUnlessAcceptedAndThenItIsReported() async throws {
        let directory = try await Self.rolledStore()
        let segments = try Self.segments(in: directory)
        #expect(segments.count > 5)
        // The last log file with events, and the empty one the store may have started after it.
        let last = try #require(segments.last { (try? directory.size(of: $0)) ?? 0 > 0 })
        let deleted = segments.filter { $0 >= last }
        for name in deleted { try FileManager.default.removeItem(atPath: directory.path + "/" + name) }
        let missing =
            deleted.count == 1 ? "\(directory.path)/\(last) is" : "\(directory.path)/\(last) and the 1 after it are"
        let before = try Self.files(in: directory)
        do {
            _ = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 200))
            Issue.record("a store missing its last log file opened")
        } catch {
            guard case .corrupted(let location, let reason) = error.kind else {
                Issue.record("\(error)")
                return
            }
            #expect(location == directory.path)
            #expect(reason.contains("acknowledged events are gone: \(missing) missing"))
            #expect(reason.contains("acceptLoss"))
        }
        #expect(try Self.files(in: directory) == before, "a refused open changed the directory")

        let accepted = try FileEventStore(
            directory: directory.path,
            options: .init(segmentBytes: 200, acceptLoss: true)
        )
        let lost = try #require(accepted.opening.lost)
        #expect(lost.events > 0 && lost.events == 40 - accepted.opening.events)
        #expect(lost.reason == "\(missing) missing")
        #expect(try await accepted.read("s0", after: 0, limit: 1).map(\.payload) == [Self.payload(1)])
        await accepted.close()
        // Accepted once, the loss is part of the history: the next open stands by what is there.
        let again = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 200))
        #expect(again.opening.lost == nil)
        await again.close()
    }

    @Test func aShortenedLastLogFileIsLossAndNothingIsCut() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        let first = store.statistics.bytes
        _ = try await store.append([Self.payload(2)], to: "s", expecting: 1)
        _ = try await store.append([Self.payload(3)], to: "s", expecting: 2)
        await store.close()
        let whole = try directory.contents(of: "segment-00000000.log")
        // Cut exactly at a commit: the log reads as whole, and only the manifest knows better.
        try directory.write(Array(whole.prefix(first)), to: "segment-00000000.log")
        #expect {
            try FileEventStore(directory: directory.path)
        } throws: { error in
            (error as? EventStoreError)?.description.contains(
                "2 acknowledged events are gone: \(directory.path)/segment-00000000.log is committed up to offset "
                    + "\(first), short of the \(whole.count) it had"
            ) == true
        }
        #expect(try directory.size(of: "segment-00000000.log") == first)
    }

    @Test func aFlippedBitInTheLastCommitIsCorruptionAndNothingIsCut() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileEventStore(directory: directory.path)
        _ = try await store.append([Self.payload(1)], to: "s", expecting: 0)
        _ = try await store.append([Self.payload(2)], to: "s", expecting: 1)
        await store.close()
        let size = try directory.size(of: "segment-00000000.log")
        // The last byte is the commit record's: without the manifest this read as an unfinished write.
        try directory.flipByte(at: size - 1, of: "segment-00000000.log")
        #expect(throws: EventStoreError.self) { try FileEventStore(directory: directory.path) }
        #expect(try directory.size(of: "segment-00000000.log") == size)
    }

    @Test func aDamagedManifestIsAnErrorUnlessLossIsAccepted() async throws {
        let directory = try await Self.rolledStore()
        let manifest = try directory.contents(of: "store.manifest")
        try directory.write(manifest.map { $0 ^ 0x20 }, to: "store.manifest")
        #expect {
            try FileEventStore(directory: directory.path)
        } throws: { error in
            (error as? EventStoreError)?.description.contains("the store's manifest is damaged") == true
        }
        let accepted = try FileEventStore(directory: directory.path, options: .init(acceptLoss: true))
        #expect(accepted.opening.events == 40)
        #expect(accepted.opening.lost?.events == 0)
        await accepted.close()
        let again = try FileEventStore(directory: directory.path)
        #expect(again.opening.lost == nil && again.opening.events == 40)
        await again.close()
    }

    /// One slot torn by a crash while the manifest was written: the other slot still holds.
    @Test func aTornManifestSlotFallsBackToTheOther() async throws {
        let directory = try await Self.rolledStore()
        var manifest = try directory.contents(of: "store.manifest")
        #expect(manifest.count == 128)
        for index in 0..<64 { manifest[index] = 0 }
        try directory.write(manifest, to: "store.manifest")
        let reopened = try FileEventStore(directory: directory.path)
        #expect(reopened.opening.events == 40)
        await reopened.close()
    }

    @Test func aReadOnlyOpenReadsAStoreInUseAndWritesNothing() async throws {
        let directory = try TemporaryDirectory()
        let writer = try FileEventStore(directory: directory.path)
        _ = try await writer.append([Self.payload(1), Self.payload(2)], to: "s", expecting: 0)
        try await writer.save(Snapshot(stream: "s", version: 2, payload: [9]))
        // What a write under way looks like to a reader: bytes with no commit after them, over the
        // zeros written ahead.
        try directory.overwrite([1, 2, 3, 4, 5, 6, 7, 8, 9], at: writer.statistics.bytes, of: "segment-00000000.log")
        let before = try Self.files(in: directory)
        let reader = try FileEventStore(directory: directory.path, options: .init(readOnly: true))
        #expect(try await reader.read("s", after: 0, limit: 10).map(\.payload) == [Self.payload(1), Self.payload(2)])
        #expect(try await reader.latestSnapshot(of: "s")?.payload == [9])
        #expect(reader.opening.truncated?.offset == writer.statistics.bytes)
        await #expect(throws: EventStoreError.self) { try await reader.append([[1]], to: "t", expecting: 0) }
        await reader.close()
        #expect(try Self.files(in: directory) == before, "a read-only open changed the directory")
        await writer.close()

        // No directory, no store: nothing is created.
        let missing = directory.path + "/none"
        #expect(throws: EventStoreError.self) { try FileEventStore(directory: missing, options: .init(readOnly: true)) }
        #expect(!FileManager.default.fileExists(atPath: missing))
    }

    /// For 1,000 single-bit flips and 1,000 truncations at random places of a closed store's files, the
    /// store either refuses to open or holds every acknowledged event: it never opens with fewer.
    ///
    /// Every other trial opens from the index checkpoint the close wrote: then the log it covers is not
    /// read at open, so damage there may show only when the damaged record is read, as an error naming
    /// it, never as fewer or other events. A damaged checkpoint is always refused, and the whole log read.
    @Test func randomFlipsAndCutsNeverOpenWithFewerEvents() async throws {
        let directory = try TemporaryDirectory(in: FileStoreLossTests.fastTemporary)
        let store = try FileEventStore(directory: directory.path, options: .init(segmentBytes: 2_000))
        var expected: [String: [[UInt8]]] = [:]
        for index in 0..<150 {
            let stream = "s\(index % 7)"
            let batch = (0...(index % 3)).map { Self.payload(index * 10 + $0) }
            _ = try await store.append(batch, to: stream, expecting: UInt64(expected[stream]?.count ?? 0))
            expected[stream, default: []] += batch
            if index % 40 == 39 {
                try await store.save(
                    Snapshot(stream: stream, version: UInt64(expected[stream]?.count ?? 0), payload: [7])
                )
            }
        }
        await store.close()
        let original = try Self.files(in: directory).filter { $0.key != "store.lock" }
        let names = original.keys.sorted()
        #expect(names.count > 4 && names.contains("store.index"))
        var generator = SplitMix(state: 27)
        var opened: [String: Int] = [:]
        var refusedReads = 0
        for trial in 0..<2_000 {
            let name = names[Int(generator.next() % UInt64(names.count))]
            var bytes = try #require(original[name])
            let flip = trial < 1_000
            if flip {
                let bit = Int(generator.next() % UInt64(bytes.count * 8))
                bytes[bit / 8] ^= UInt8(1 << (bit % 8))
            } else {
                bytes = Array(bytes.prefix(Int(generator.next() % UInt64(bytes.count))))
            }
            let copy = try TemporaryDirectory(in: FileStoreLossTests.fastTemporary)
            for (other, contents) in original where other != name { try copy.write(contents, to: other) }
            try copy.write(bytes, to: name)
            let fromCheckpoint = trial.isMultiple(of: 2)
            let damage = "trial \(trial): \(flip ? "a flipped bit" : "a cut") in \(name)"
            let reopened: FileEventStore
            do {
                reopened = try FileEventStore(
                    directory: copy.path,
                    options: .init(segmentBytes: 2_000, indexCheckpoint: fromCheckpoint)
                )
            } catch {
                continue
            }
            if name == "store.index" && fromCheckpoint {
                guard case .refused = reopened.opening.checkpoint else {
                    Issue.record("\(damage): the damaged checkpoint was used")
                    continue
                }
            }
            if !fromCheckpoint { opened[name, default: 0] += 1 }
            for (stream, payloads) in expected {
                do {
                    let found = try await reopened.read(stream, after: 0, limit: 1_000).map(\.payload)
                    #expect(found == payloads, "\(damage)")
                } catch let error as EventStoreError {
                    guard case .corrupted = error.kind, fromCheckpoint, name.hasPrefix("segment-") else {
                        Issue.record("\(damage): \(error)")
                        continue
                    }
                    refusedReads += 1
                }
            }
            await reopened.close()
        }
        // Damage to a log file is always refused by a whole read. Some to the manifest is not (a flip in a
        // slot's padding, or in the older slot, which the newer outvotes), and none to the checkpoint (a
        // whole read ignores it); both lose nothing, as checked above.
        #expect(opened.keys.allSatisfy { $0 == "store.manifest" || $0 == "store.index" }, "\(opened)")
        // Here every log file is shorter than a checkpoint's fingerprint of one, so damage to one refuses
        // the checkpoint; IndexCheckpointTests shows damage the fingerprint does not reach found by a read.
        #expect(refusedReads == 0)
    }

    /// A file system where syncs cost little: the property test opens 2,000 stores.
    static let fastTemporary: String? = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : nil
}
