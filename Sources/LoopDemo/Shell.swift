internal import EventSources

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Runs shell commands: the service the demo's process handler is given.
public protocol Shell: Sendable {
    /// Runs `command` with `/bin/sh -c`, standard input `/dev/null`, returning its exit status (128 + N
    /// if killed by signal N) and its combined output. Cancelling the task kills the command. No
    /// descriptor of the calling process leaks into the command.
    func run(_ command: String) async throws -> (status: Int32, output: String)
}

/// Why a command could not be run.
public struct ShellError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `errno` from the failed call.
    public let code: Int32
    /// What was being done.
    public let action: String

    /// `cannot <action> (errno N)`.
    public var description: String { "cannot \(action) (errno \(code))" }
}

/// Real child processes via `posix_spawn`: output is read, and the exit waited for, on a thread of
/// their own, so the concurrency pool never blocks. A cancelled command is killed with `SIGKILL`,
/// together with every process it started: its process group, and any descendant that left it.
public struct SystemShell: Shell {
    /// The most output kept per command; the rest is read and dropped.
    public static var maximumOutput: Int { 64 * 1_024 }

    /// Creates the shell.
    public init() {}

    /// Runs `command`; see ``Shell/run(_:)``.
    public func run(_ command: String) async throws -> (status: Int32, output: String) {
        let child = try Child(command)
        return try await withTaskCancellationHandler {
            let result = await child.result()
            try Task.checkCancellation()
            return result
        } onCancel: {
            child.kill()
        }
    }
}

/// One spawned command.
private final class Child: Sendable {
    let pid: pid_t
    let output: Int32

    init(_ command: String) throws {
        (pid, output) = try Self.spawn(command)
    }

    private static func spawn(_ command: String) throws -> (pid_t, Int32) {
        // No descriptor of the demo may reach a command: a command started later that inherited this
        // pipe would keep this command's output open (and the command "running") until it exited. The
        // pipe is close-on-exec, and every child closes all descriptors above 2 before it runs.
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw ShellError(code: errno, action: "create a pipe") }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // A job reads nothing from the demo's own standard input (its commands, with --stdin).
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addclose(&actions, pipeEnds[0])
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 2)
        posix_spawn_file_actions_addclose(&actions, pipeEnds[1])
        closeAllAboveStandardStreams(&actions)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The calling thread may block or ignore signals (Swift's concurrency threads block most), and a
        // child inherits both: start it with no signal blocked and the usual ones at their defaults.
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(
            &attributes,
            Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        )
        posix_spawnattr_setpgroup(&attributes, 0)
        let words: [String] = ["/bin/sh", "-c", command]
        var arguments: [UnsafeMutablePointer<CChar>?] = words.map { word in word.withCString { strdup($0) } }
        arguments.append(nil)
        defer { for argument in arguments { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/sh", &actions, &attributes, arguments, environ)
        close(pipeEnds[1])
        guard spawned == 0 else {
            close(pipeEnds[0])
            throw ShellError(code: spawned, action: "start /bin/sh")
        }
        return (pid, pipeEnds[0])
    }

    /// Reads the output to its end and waits for the exit, on a thread of its own.
    func result() async -> (status: Int32, output: String) {
        await withCheckedContinuation { continuation in
            let thread = OSThread(
                {
                    var bytes: [UInt8] = []
                    var buffer = [UInt8](repeating: 0, count: 4_096)
                    while true {
                        let count = buffer.withUnsafeMutableBytes { read(self.output, $0.baseAddress, $0.count) }
                        if count > 0 {
                            if bytes.count < SystemShell.maximumOutput { bytes += buffer.prefix(count) }
                        } else if count == 0 || errno != EINTR {
                            break
                        }
                    }
                    close(self.output)
                    var status: Int32 = 0
                    while waitpid(self.pid, &status, 0) < 0 && errno == EINTR {}
                    let exit = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
                    let text = String(decoding: bytes, as: UTF8.self)
                    continuation.resume(returning: (exit, text.trimmingWhitespace()))
                },
                runHereIfUnavailable: true
            )
            thread.detach()
        }
    }

    /// Kills the command and everything it started: its process group, and every descendant, even one
    /// that left the group (`setsid`).
    func kill() {
        ProcessTree.killTree(of: pid, group: pid)
    }
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), looked up at run time because
/// Swift's Glibc module does not export it; `nil` where the C library lacks it.
private let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
        return nil
    }
    // The symbol is that function, whose C signature is exactly this type.
    return unsafeBitCast(
        symbol,
        to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self
    )
}()

/// Adds actions closing every descriptor above 2 in the child: with `addclosefrom` where the C library
/// has it, otherwise by listing the descriptors open now (one opened by another thread in between,
/// without close-on-exec, could then still reach the child).
private func closeAllAboveStandardStreams(_ actions: inout posix_spawn_file_actions_t) {
    if let addCloseFrom, addCloseFrom(&actions, 3) == 0 { return }
    guard let directory = opendir("/proc/self/fd") else { return }
    defer { closedir(directory) }
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if let descriptor = Int32(name), descriptor > 2 { posix_spawn_file_actions_addclose(&actions, descriptor) }
    }
}

extension String {
    /// The string without leading and trailing spaces and newlines.
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
