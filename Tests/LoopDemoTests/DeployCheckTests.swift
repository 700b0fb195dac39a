import Foundation
import LoopDemo
import Testing

/// `loop-demo verify --store DIR`, the check before a deploy, on a store an earlier build of the demo
/// wrote and that is checked in (`Tests/Fixtures/loop-demo-store-2026-11-28`, written by
/// `loop-demo --store DIR` at 030614d): every later build must still replay it, or say why not.
@Suite struct DeployCheckTests {
    static let fixture = FuzzRegressionTests.root + "/Tests/Fixtures/loop-demo-store-2026-11-28"
    static let files = ["segment-00000000.log", "store.index", "store.manifest"]

    /// A copy of the fixture in a scratch directory, so no test can change the checked-in one.
    func copy(into scratch: String) throws -> String {
        let store = scratch + "/store"
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        for file in Self.files {
            try FileManager.default.copyItem(atPath: Self.fixture + "/" + file, toPath: store + "/" + file)
        }
        return store
    }

    @Test func theStoreAnEarlierBuildWroteVerifiesAndIsLeftAsItWas() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let store = try copy(into: scratch)
        let (status, output) = try await Demo.sh("\"$DEMO\" verify --store '\(store)'")
        #expect(status == 0, "\(output)")
        #expect(output == "verified 1 stream and 38 records in \(store) with revision 1 of the program")
        // Read only: the same files, byte for byte, and no lock file left.
        #expect(FileSystem.entries(of: store)?.sorted() == Self.files)
        for file in Self.files {
            #expect(
                FileSystem.bytes(at: store + "/" + file) == FileSystem.bytes(at: Self.fixture + "/" + file),
                "\(file)"
            )
        }
        let replay = try await Demo.sh("\"$DEMO\" replay --store '\(store)'")
        #expect(replay.status == 0 && replay.output.contains("9 succeeded, 2 failed, 1 cancelled"), "\(replay.output)")
    }

    @Test func aDamagedStoreFailsTheCheckAndSaysWhere() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let store = try copy(into: scratch)
        // One byte flipped in the middle of the log: a record's checksum no longer matches.
        var log = FileSystem.bytes(at: store + "/segment-00000000.log")
        log[log.count / 2] ^= 0xFF
        try Data(log).write(to: URL(fileURLWithPath: store + "/segment-00000000.log"))
        let (status, output) = try await Demo.sh("\"$DEMO\" verify --store '\(store)'")
        #expect(status == 65, "\(output)")
        #expect(output.contains("segment-00000000.log"), "\(output)")
    }

    @Test func noStoreOrNoDirectoryIsAClearError() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let empty = try await Demo.sh("\"$DEMO\" verify --store '\(scratch)'")
        #expect(empty.status == 66 && empty.output.contains("no store in"), "\(empty.output)")
        let usage = try await Demo.sh("\"$DEMO\" verify '\(scratch)'")
        #expect(usage.status == 64 && usage.output.contains("usage: verify --store DIR"), "\(usage.output)")
    }
}
