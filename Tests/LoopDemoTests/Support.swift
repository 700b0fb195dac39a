import Foundation
import LoopDemo
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Waits until `condition` holds, yielding and pausing briefly between checks; fails the test rather
/// than hang if it never does within a generous safety limit.
func waitUntil(
    _ description: String = "condition",
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) async {
    let limit = ContinuousClock.now + .seconds(300)
    while !condition() {
        guard ContinuousClock.now < limit else {
            Issue.record("timed out waiting for \(description)", sourceLocation: sourceLocation)
            return
        }
        try? await Task.sleep(for: .milliseconds(5))
    }
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet, which is just as dead).
func isGone(_ pid: pid_t) -> Bool {
    guard kill(pid, 0) == 0 else { return true }
    let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
    return stat.split(separator: ")").last?.trimmingCharacters(in: .whitespaces).hasPrefix("Z") ?? true
}

/// The built `loop-demo`, next to the test bundle.
enum Demo {
    static var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("loop-demo")
            .path
    }

    /// A fresh scratch directory for one test.
    static func scratch(_ name: String = #function) -> String {
        let path = NSTemporaryDirectory() + "effectloop-demo-\(name.filter(\.isLetter))-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs `script` with `/bin/sh`, `$DEMO` set to the binary; its exit status and output (standard
    /// output and standard error together).
    ///
    /// Every process the script starts carries a marker in its environment; once the script has ended,
    /// none may be left in the process table. One still there after a short wait fails the test and is
    /// killed, so no test leaves a process behind unnoticed.
    static func sh(
        _ script: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (status: Int32, output: String) {
        let marker = "EFFECTLOOP_TEST_RUN=\(UUID().uuidString)"
        let (status, output, _) = try await SystemShell().run(
            "export \(marker); DEMO='\(binary)'; {\n\(script)\n} 2>&1"
        )
        var leftovers = processes(carrying: marker)
        for _ in 0..<100 where !leftovers.isEmpty {
            try await Task.sleep(for: .milliseconds(20))
            leftovers = processes(carrying: marker)
        }
        if !leftovers.isEmpty {
            Issue.record("processes left running after the script: \(leftovers)", sourceLocation: sourceLocation)
            for pid in leftovers { kill(pid, SIGKILL) }
        }
        return (status, output)
    }

    /// The live processes whose environment holds `entry` (`NAME=value`).
    static func processes(carrying entry: String) -> [pid_t] {
        (FileSystem.entries(of: "/proc") ?? []).compactMap(pid_t.init).filter { pid in
            FileSystem.bytes(at: "/proc/\(pid)/environ").split(separator: 0).contains { $0.elementsEqual(entry.utf8) }
        }
    }

    /// Shell lines that wait (at most 10 s) for the process whose pid is in `pidFile` to be gone from the
    /// process table, then append "job gone" or "job alive" to `out` (killing a survivor, so no test
    /// leaves a process behind).
    static func reportWhetherGone(pidFile: String, into out: String) -> String {
        """
        job=$(cat '\(pidFile)')
        for i in $(seq 200); do kill -0 $job 2>/dev/null || break; sleep 0.05; done
        if kill -0 $job 2>/dev/null; then echo "job alive" >> '\(out)'; kill -9 $job; else echo "job gone" >> '\(out)'; fi
        """
    }

    /// The file's contents, or "" if it cannot be read.
    static func read(_ path: String) -> String {
        String(decoding: FileSystem.bytes(at: path), as: UTF8.self)
    }

}
