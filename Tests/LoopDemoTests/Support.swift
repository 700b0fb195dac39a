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
    static func sh(_ script: String) async throws -> (status: Int32, output: String) {
        let (status, output, _) = try await SystemShell().run("DEMO='\(binary)'; {\n\(script)\n} 2>&1")
        return (status, output)
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

    /// The file's contents, or "" if it cannot be read. Read with the C library: Foundation's
    /// `String(contentsOfFile:)` leaked a 4 KiB buffer here under LeakSanitizer (a file being written).
    static func read(_ path: String) -> String {
        guard let file = fopen(path, "r") else { return "" }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
