import LoopPersistence
import LoopSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `kill -9` of a process whose file store compacts all the time (`loop-bench compacting-node`): at
/// every point, the store opens with everything acknowledged that retention keeps.
@Suite struct CompactionFaultTests {
    static let options = FileEventStore.Options(segmentBytes: 8_192, retention: .afterSnapshots(2))

    /// Starts a node on `directory`, reads its lines until it has acknowledged `count` events, kills it
    /// with SIGKILL and waits for it; what it acknowledged is added to `acknowledged`. `false` if it ended
    /// before (its standard error says why).
    static func run(
        _ directory: String,
        until count: Int,
        into acknowledged: inout CompactionTests.Acknowledged
    ) throws -> Bool {
        var ends: [Int32] = [0, 0]
        // Close-on-exec: no other child of this process (another test's) may hold the node's output.
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw DurableNode.Failure("socketpair")
        }
        var failure: Int32 = 0
        let binary = DurableNode.binary
        let pid = ChildProcess.spawn(
            binary,
            [binary, "compacting-node", directory],
            output: .descriptor(ends[1]),
            options: ChildProcess.Options(endsWithThisProcess: true),
            failure: &failure
        )
        close(ends[1])
        defer { close(ends[0]) }
        guard let pid else { throw DurableNode.Failure("cannot start \(binary): errno \(failure)") }
        var seen = 0
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        var killed = false
        while true {
            if seen >= count && !killed {
                killed = true
                var status: Int32 = 0
                // Still running and ours (an unreaped child's pid is never reused): safe to signal.
                if waitpid(pid, &status, WNOHANG) == 0 { ChildProcess.stop(pid, with: SIGKILL) }
            }
            // After the kill, what it printed before it died is read too: acknowledged as well.
            let read = buffer.withUnsafeMutableBytes { Glibc.read(ends[0], $0.baseAddress, $0.count) }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { break }
            pending += buffer[..<read]
            while let newline = pending.firstIndex(of: 10) {
                let fields = String(decoding: pending[..<newline], as: UTF8.self).split(separator: " ")
                pending.removeFirst(newline + 1)
                guard fields.count == 3, let version = UInt64(fields[2]) else { continue }
                let stream = String(fields[1])
                if fields[0] == "a" {
                    acknowledged.versions[stream] = version
                    seen += 1
                } else {
                    acknowledged.snapshots[stream, default: []].append(version)
                }
            }
        }
        if !killed {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == 0 { ChildProcess.stop(pid, with: SIGKILL) }
        }
        return killed
    }

    @Test func killedAtTwentyPointsWhileCompactingTheStoreKeepsEverythingAcknowledged() async throws {
        let directory = try TemporaryDirectory()
        var generator = SplitMix(state: 2_711)
        var acknowledged = CompactionTests.Acknowledged()
        for point in 0..<20 {
            let count = Int.random(in: 20..<400, using: &generator)
            guard try Self.run(directory.path, until: count, into: &acknowledged) else {
                Issue.record("the node ended before \(count) acknowledgements, at kill point \(point)")
                return
            }
            let store = try FileEventStore(directory: directory.path, options: Self.options)
            for (stream, version) in acknowledged.versions {
                let stored = try await store.version(of: stream)
                #expect(stored >= version, "\(stream) at kill point \(point)")
                let latest = try await store.latestSnapshot(of: stream)
                // A snapshot saved as the node was killed, before it said so, is the latest.
                if let saved = latest?.version, saved > acknowledged.snapshots[stream]?.last ?? 0 {
                    acknowledged.snapshots[stream, default: []].append(saved)
                }
                #expect(latest?.version ?? 0 >= acknowledged.snapshots[stream]?.last ?? 0)
                if let latest { #expect(latest.payload == CompactionTests.snapshotPayload(stream, latest.version)) }
                // The events after the latest snapshot, and after the older of the last two.
                let points = [latest?.version ?? 0, acknowledged.kept(stream)]
                for after in points where after <= stored {
                    let events = try await store.read(stream, after: after, limit: 100_000)
                    #expect(events.map(\.version) == Array((after + 1)..<(stored + 1)), "\(stream) after \(after)")
                    #expect(events.allSatisfy { $0.payload == CompactionTests.payload(stream, $0.version) })
                }
            }
            await store.close()
        }
        // Compaction ran by itself while the node was killed over and over: the first log files are gone.
        let left = try CompactionTests.logFiles(in: directory)
        #expect(left.first != "segment-00000000.log", "\(left)")
        // And a pass after all those kills leaves a few files. (How many the background passes had left
        // when the last kill came depends on how far they lagged the writer: 13 under the thread
        // sanitizer once.)
        let store = try FileEventStore(directory: directory.path, options: Self.options)
        _ = try await store.compact()
        await store.close()
        let files = try CompactionTests.logFiles(in: directory)
        #expect(files.count < 12, "\(files)")
    }
}
