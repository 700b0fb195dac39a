import Foundation
import LoopDemo
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct ShellTests {
    let shell = SystemShell()

    @Test func aCommandsExitStatusAndOutputAreReported() async throws {
        let (status, output) = try await shell.run("echo out; echo err >&2; exit 3")
        #expect(status == 3)
        #expect(output == "out\nerr")
    }

    @Test func aCommandKilledBySignalReports128PlusTheSignal() async throws {
        let (status, _) = try await shell.run("kill -TERM $$")
        #expect(status == 128 + SIGTERM)
    }

    @Test func cancellingARunKillsTheCommandAndEverythingItStarted() async throws {
        let marker = "/tmp/effectloop-shelltest-\(getpid())-\(Int.random(in: 0..<1_000_000))"
        defer { unlink(marker) }
        let run = Task { try await shell.run("sleep 60 & echo $! > \(marker); wait") }
        await waitUntil { Demo.read(marker).hasSuffix("\n") }
        let child = pid_t(Demo.read(marker).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(child > 0)
        run.cancel()
        await #expect(throws: CancellationError.self) { try await run.value }
        await waitUntil { isGone(child) }
        #expect(isGone(child))
    }
}
