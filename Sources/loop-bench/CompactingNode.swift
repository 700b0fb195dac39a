import LoopPersistence

#if canImport(Glibc)
import Glibc
#endif

/// `loop-bench compacting-node DIR`: a process appending to five streams of the file store in DIR, one
/// event at a time, with a snapshot of a stream every 7 of its events, under retention "after the latest
/// 2 snapshots" and log files of 8 KiB, so the store compacts all the time: for the fault test that kills
/// it. Prints `a STREAM VERSION` once an event is on disk and `s STREAM VERSION` once a snapshot is;
/// runs until killed. The event at a version is `CompactingNode.payload`, whoever writes it.
func runCompactingNode(_ words: [String]) async -> Int32 {
    guard words.count == 2 else {
        Measure.printError("usage: loop-bench compacting-node DIRECTORY\n")
        return 64
    }
    do {
        let store = try FileEventStore(
            directory: words[1],
            options: .init(segmentBytes: 8_192, retention: .afterSnapshots(2))
        )
        var versions: [String: UInt64] = [:]
        for index in 0..<5 { versions["c\(index)"] = try await store.version(of: "c\(index)") }
        var index = 0
        while true {
            let stream = "c\(index % 5)"
            let version = (versions[stream] ?? 0) + 1
            _ = try await store.append([CompactingNode.payload(stream, version)], to: stream, expecting: version - 1)
            versions[stream] = version
            writeLine("a \(stream) \(version)")
            if version % 7 == 0 {
                try await store.save(
                    Snapshot(stream: stream, version: version, payload: CompactingNode.snapshot(stream, version))
                )
                writeLine("s \(stream) \(version)")
            }
            index += 1
        }
    } catch {
        Measure.printError("compacting-node: \(error)\n")
        return 74
    }
}

/// What `loop-bench compacting-node` writes.
enum CompactingNode {
    /// The event at `version` of `stream`.
    static func payload(_ stream: String, _ version: UInt64) -> [UInt8] {
        Array("\(stream) event \(version) ".utf8) + [UInt8](repeating: UInt8(version % 251), count: 24)
    }

    /// The snapshot at `version` of `stream`.
    static func snapshot(_ stream: String, _ version: UInt64) -> [UInt8] {
        Array("\(stream) state at \(version)".utf8)
    }
}
