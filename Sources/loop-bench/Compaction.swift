import LoopPersistence
import LoopSupport

#if canImport(Glibc)
import Glibc
#endif

extension Workloads {
    /// w17: one hot stream whose state grows by 8 bytes an event, `w17Events` events appended 1,000 at a
    /// time, a snapshot of its whole state every 30,000 events (every 3,000 in `--quick`), on a file store
    /// keeping the events after the latest 2 snapshots (`Retention.afterSnapshots(2)`, log files of 1 MiB):
    /// the directory's bytes after the last append and a compaction pass, against the bound of the final
    /// snapshot and the events after it (bar: at most 4 times). Then, once: a store of `w17ShrinkStreams`
    /// streams of 100 events each (a batch of 99, a snapshot, one more), 1% of its events kept after
    /// retention "after the latest snapshot", compacted (log files of 1 MiB: the file being written is never
    /// compacted): its bytes against those of the records it keeps (the acceptance asks at most 2 times,
    /// here with a log file's 1 MiB more).
    static func w17(_ sizes: Sizes) async throws -> Outcome {
        let every = sizes.w17Events >= 1_000_000 ? 30_000 : 3_000
        var disks: [Double] = []
        var bounds: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let directory = scratchStore("w17")
            defer { removeTree(directory) }
            let store = try FileEventStore(
                directory: directory,
                options: .init(segmentBytes: 1 << 20, retention: .afterSnapshots(2))
            )
            let batch = (0..<1_000).map { index in [UInt8](repeating: UInt8(index % 256), count: 16) }
            var version: UInt64 = 0
            var final = 0
            var after = 0
            while version < UInt64(sizes.w17Events) {
                version = try await store.append(batch, to: "hot", expecting: version)
                after += eventsRecordBytes(stream: "hot", payloads: batch)
                if version % UInt64(every) == 0 {
                    // The state: 8 bytes for every event so far.
                    let state = [UInt8](repeating: UInt8(version % 251), count: 8 * Int(version))
                    try await store.save(Snapshot(stream: "hot", version: version, payload: state))
                    final = snapshotRecordBytes(stream: "hot", payload: state)
                    after = 0
                }
            }
            _ = try await store.compact()
            let snapshot = try await store.latestSnapshot(of: "hot")
            let kept = try await store.read("hot", after: snapshot?.version ?? 0, limit: 1 << 30)
            await store.close()
            let disk = directoryBytes(directory)
            disks.append(Double(disk))
            bounds.append(Double(final + after))
            ok = ok && disk <= 4 * (final + after) && kept.count == sizes.w17Events % every
        }
        let shrink = try await shrinkage(streams: sizes.w17ShrinkStreams)
        let disk = Measure.median(disks)
        return Outcome(
            workload: "w17",
            title: "disk of one hot entity whose state grows, \(sizes.w17Events) events, "
                + "keeping the events after its latest 2 snapshots, against its final snapshot and the events after it",
            perSecond: disk,
            rawPerSecond: 0,
            runs: sizes.runs,
            ok: ok && shrink.ok,
            extra: [
                ("disk_bytes", disk), ("disk_bytes_min", disks.min() ?? 0), ("disk_bytes_max", disks.max() ?? 0),
                ("bound_bytes", Measure.median(bounds)), ("disk_x_bound", disk / max(1, Measure.median(bounds))),
                ("shrink_events", Double(shrink.events)), ("shrink_before_bytes", Double(shrink.before)),
                ("shrink_kept_bytes", Double(shrink.kept)), ("shrink_after_bytes", Double(shrink.after)),
                ("shrink_x_kept", Double(shrink.after) / Double(max(1, shrink.kept))),
                ("shrink_seconds", shrink.seconds),
            ],
            rates: disks
        )
    }

    /// A store of `streams` streams of 100 events (99 in one append, a snapshot, one more), compacted under
    /// "keep the events after the latest snapshot": the log's bytes before and after, the bytes of the
    /// records it keeps, the seconds compaction took, and whether every stream reads back.
    static func shrinkage(
        streams: Int
    ) async throws -> (events: Int, before: Int, kept: Int, after: Int, seconds: Double, ok: Bool) {
        let directory = scratchStore("w17-shrink")
        defer { removeTree(directory) }
        let event = [UInt8](repeating: 7, count: 16)
        let first = Array(repeating: event, count: 99)
        let state = [UInt8](repeating: 1, count: 16)
        var kept = 0
        do {
            // Written keeping everything, so nothing is compacted before the measured pass.
            let store = try FileEventStore(directory: directory, options: .init(segmentBytes: 1 << 20))
            try await fill(store, streams: streams, each: first) { "stream-\($0)" }
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                for worker in 0..<64 {
                    tasks.addTask {
                        for stream in stride(from: worker, to: streams, by: 64) {
                            try await store.save(Snapshot(stream: "stream-\(stream)", version: 99, payload: state))
                            _ = try await store.append([event], to: "stream-\(stream)", expecting: 99)
                        }
                    }
                }
                try await tasks.waitForAll()
            }
            await store.close()
            for stream in 0..<streams {
                kept += snapshotRecordBytes(stream: "stream-\(stream)", payload: state)
                kept += eventsRecordBytes(stream: "stream-\(stream)", payloads: [event])
            }
        }
        let before = directoryBytes(directory)
        let store = try FileEventStore(
            directory: directory,
            options: .init(segmentBytes: 1 << 20, retention: .afterSnapshots(1))
        )
        let seconds = try await Measure.seconds { _ = try await store.compact() }
        var ok = true
        for stream in stride(from: 0, to: streams, by: max(1, streams / 100)) {
            let events = try await store.read("stream-\(stream)", after: 99, limit: 10)
            ok = ok && events.count == 1 && events.first?.payload == event
        }
        await store.close()
        let after = directoryBytes(directory)
        // The file being written is never compacted: the bound allows it.
        return (streams * 100, before, kept, after, seconds, ok && after <= 2 * kept + (1 << 20))
    }

    /// The bytes an events record of `payloads` takes in a log file: frame (8), kind, stream, version,
    /// previous record, count (25 and the stream's name), and a length before each event.
    static func eventsRecordBytes(stream: String, payloads: [[UInt8]]) -> Int {
        8 + 25 + stream.utf8.count + payloads.reduce(0) { $0 + 4 + $1.count }
    }

    /// The bytes a snapshot record takes in a log file: frame (8), kind, stream, version (13 and the name).
    static func snapshotRecordBytes(stream: String, payload: [UInt8]) -> Int {
        8 + 13 + stream.utf8.count + payload.count
    }

    /// The bytes of the files in `directory`.
    static func directoryBytes(_ directory: String) -> Int {
        guard let folder = opendir(directory) else { return 0 }
        defer { closedir(folder) }
        var total = 0
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            var status = stat()
            if name != ".", name != "..", stat(directory + "/" + name, &status) == 0 { total += Int(status.st_size) }
        }
        return total
    }
}
