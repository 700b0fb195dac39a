import Foundation
import LoopDemo
import LoopRuntime
import LoopSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct ShellTests {
    let shell = SystemShell()

    @Test func aCommandsExitStatusAndOutputAreReported() async throws {
        let (status, output, errors) = try await shell.run("echo out; echo err >&2; exit 3")
        #expect(status == 3)
        #expect(output == "out")
        #expect(errors == "err")
    }

    @Test func aCommandKilledBySignalReports128PlusTheSignal() async throws {
        let (status, _, _) = try await shell.run("kill -TERM $$")
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

    /// The shell reaps what its own commands left behind, and nothing else: a child this process
    /// started some other way (a test's server, a cluster node) keeps its exit status for whoever
    /// waits for it. The shell once reaped every exited child, and a cluster test beside the demo's
    /// tests found its node's status gone (`ECHILD`).
    @Test func aChildTheShellDidNotStartKeepsItsExitStatusForItsOwner() async throws {
        var failure: Int32 = 0
        let pid = try #require(
            ChildProcess.spawn("/bin/sh", ["/bin/sh", "-c", "exit 7"], output: .discarded, failure: &failure)
        )
        await waitUntil("the child has exited and is not yet reaped") {
            Demo.read("/proc/\(pid)/stat").split(separator: ")").last?.split(separator: " ").first == "Z"
        }
        let (status, _, _) = try await shell.run("true")
        #expect(status == 0)
        var exit: Int32 = 0
        #expect(waitpid(pid, &exit, WNOHANG) == pid)
        #expect((exit >> 8) & 0xff == 7)
    }

    /// A job's output pipe used to leak into jobs started at the same time, so a quick job stayed
    /// "running" until a slow sibling exited (7 of 10 runs of the demo). Here ten quick and ten slow
    /// commands start together: every quick one is done while all the slow ones still run.
    @Test func quickCommandsAreNotHeldBySlowSiblingsStartedAlongside() async throws {
        let finishedSlow = Locked(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            var slow: [Task<Void, Never>] = []
            for _ in 0..<10 {
                slow.append(
                    Task {
                        // Long enough that no slow sibling can end on its own while the quick ones run,
                        // however loaded the machine (under the sanitizers the quick ones took 30 s).
                        _ = try? await shell.run("sleep 600")
                        finishedSlow.withLock { $0 += 1 }
                    }
                )
                group.addTask { _ = try await shell.run("true") }
            }
            try await group.waitForAll()
            #expect(finishedSlow.withLock { $0 } == 0)
            for task in slow { task.cancel() }
            for task in slow { await task.value }
        }
    }

    @Test func noDescriptorOfTheDemoLeaksIntoACommand() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        defer {
            close(descriptors[0])
            close(descriptors[1])
        }
        let (status, output, _) = try await shell.run("ls /proc/self/fd")
        #expect(status == 0)
        // 0, 1 and 2, and the descriptor `ls` opens to list the directory.
        let open = Set(output.split(whereSeparator: \.isNewline).compactMap { Int32($0) })
        #expect(!open.contains(descriptors[0]) && !open.contains(descriptors[1]))
    }

    @Test func aCommandReadsNothingFromTheDemosStandardInput() async throws {
        let (status, output, _) = try await shell.run("readlink /proc/self/fd/0")
        #expect(status == 0)
        #expect(output == "/dev/null")
    }

    /// Only the end of standard error is kept, bounded: where a failure's reason usually is.
    @Test func theTailOfStandardErrorIsKeptBounded() async throws {
        let (status, _, errors) = try await shell.run(
            "i=0; while [ $i -lt 2000 ]; do echo \"noise $i\" >&2; i=$((i+1)); done; nosuchcommand-xyz"
        )
        #expect(status == 127)
        #expect(errors.utf8.count <= SystemShell.maximumErrors)
        #expect(errors.hasSuffix("not found"))
    }
}

/// A node's bound on its commands, whatever jobs they belong to.
@Suite struct BoundedShellTests {
    /// A shell whose commands run until the test finishes them, by name.
    final class HeldShell: Shell {
        let held = Locked<[String: CheckedContinuation<Void, Never>]>([:])
        let started = Locked<[String]>([])

        func run(_ command: String) async throws -> (status: Int32, output: String, errors: String) {
            await withCheckedContinuation { continuation in
                held.withLock { $0[command] = continuation }
                started.withLock { $0.append(command) }
            }
            return (0, command, "")
        }

        func finish(_ command: String) {
            held.withLock { $0.removeValue(forKey: command) }?.resume()
        }

        var running: [String] { held.withLock { $0.keys.sorted() } }
    }

    @Test func atMostTheLimitRunAndTheOthersStartInTheOrderTheyAsked() async throws {
        let inner = HeldShell()
        let shell = BoundedShell(inner, limit: 2)
        var runs: [Task<String, any Error>] = []
        for index in 0..<5 {
            runs.append(Task { try await shell.run("c\(index)").output })
            await waitUntil { shell.usage.running + shell.usage.waiting == index + 1 }
        }
        #expect(inner.running == ["c0", "c1"] && shell.usage == (2, 3))
        inner.finish("c1")
        await waitUntil { inner.running == ["c0", "c2"] }
        inner.finish("c0")
        await waitUntil { inner.running == ["c2", "c3"] }
        inner.finish("c2")
        inner.finish("c3")
        await waitUntil { inner.running == ["c4"] }
        inner.finish("c4")
        for (index, run) in runs.enumerated() { #expect(try await run.value == "c\(index)") }
        #expect(inner.started.withLock { $0 } == ["c0", "c1", "c2", "c3", "c4"])
        #expect(shell.usage == (0, 0))
    }

    @Test func aRunCancelledWhileWaitingStartsNothingAndGivesUpItsTurn() async throws {
        let inner = HeldShell()
        let shell = BoundedShell(inner, limit: 1)
        let first = Task { try await shell.run("first") }
        await waitUntil { inner.running == ["first"] }
        let waiting = Task { try await shell.run("cancelled") }
        let next = Task { try await shell.run("next") }
        await waitUntil { shell.usage.waiting == 2 }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(shell.usage == (1, 1))
        inner.finish("first")
        await waitUntil { inner.running == ["next"] }
        inner.finish("next")
        _ = try await (first.value, next.value)
        #expect(inner.started.withLock { $0 } == ["first", "next"])
        #expect(shell.usage == (0, 0))
    }
}
