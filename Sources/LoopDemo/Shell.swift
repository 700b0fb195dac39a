internal import EventSources
internal import LoopRuntime
internal import LoopSupport

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
    /// if killed by signal N), its standard output, and the tail of its standard error. Cancelling the
    /// task kills the command. No descriptor of the calling process leaks into the command.
    func run(_ command: String) async throws -> (status: Int32, output: String, errors: String)
}

/// Why a command could not be run.
public struct ShellError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `errno` from the failed call.
    public let code: Int32
    /// What was being done.
    public let operation: String

    /// `cannot <operation> (errno N)`.
    public var description: String { "cannot \(operation) (errno \(code))" }
}

/// Real child processes, started through `LoopSupport`'s `ChildProcess`: output is read, and the exit
/// waited for, on a thread of their own, so the concurrency pool never blocks. A cancelled command is killed with `SIGKILL`,
/// together with every process it started: its process group, and any descendant that left it.
public struct SystemShell: Shell {
    /// The most output kept per command (its beginning); the rest is read and dropped.
    public static var maximumOutput: Int { 64 * 1_024 }
    /// The most standard error kept per command (its end, where the reason for a failure usually is).
    public static var maximumErrors: Int { 4 * 1_024 }

    /// The `loop-demo` executable that guards each command (see ``JobGuard``), or `nil` to start the
    /// shell directly.
    let guardExecutable: String?

    /// Creates the shell. With `guardExecutable` (the demo's own executable), each command runs under a
    /// ``JobGuard``, so it dies with the demo even when the demo is killed with SIGKILL.
    public init(guardExecutable: String? = nil) {
        self.guardExecutable = guardExecutable
    }

    /// Runs `command`; see ``Shell/run(_:)``.
    public func run(_ command: String) async throws -> (status: Int32, output: String, errors: String) {
        var words = ["/bin/sh", "-c", command]
        if let guardExecutable { words = [guardExecutable, JobGuard.flag, "\(getpid())"] + words }
        let child = try await Child.start(words)
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
///
/// Everything the command's thread learns (the process, then the result) goes through one lock: the
/// thread and the task that awaits the command share nothing else.
private final class Child: Sendable {
    typealias Result = (status: Int32, output: String, errors: String)

    /// The spawned process: its pid, the read ends of its output pipes, and the pipes' inodes
    /// (whatever holds them open belongs to the command).
    struct Process {
        let pid: pid_t
        let output: Int32
        let errors: Int32
        let pipes: Set<UInt64>
    }

    private enum Outcome {
        case running
        case waiting(CheckedContinuation<Result, Never>)
        case finished(Result)
    }

    private let state = Locked<(process: Process?, outcome: Outcome)>((nil, .running))

    /// The commands running now, whose exits their own threads wait for: what may not be reaped
    /// anywhere else.
    private static let running = Locked(Set<pid_t>())

    /// Starts `words` on a thread of its own, which then reads the command's output and waits for its
    /// exit. The same thread does both: a guard asks to be signalled when the thread that started it
    /// ends, so that thread must outlive the command.
    static func start(_ words: [String]) async throws -> Child {
        let child = Child()
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = OSThread(
                {
                    let process: Process
                    do {
                        process = try running.withLock { running in
                            let (pid, output, errors) = try spawn(words)
                            running.insert(pid)
                            return Process(
                                pid: pid,
                                output: output,
                                errors: errors,
                                pipes: Set([output, errors].compactMap(ProcessTree.pipeInode))
                            )
                        }
                    } catch {
                        started.resume(throwing: error)
                        return
                    }
                    child.state.withLock { $0.process = process }
                    started.resume()
                    child.finish(Self.waitForExit(process))
                },
                runHereIfUnavailable: true
            )
            thread.detach()
        }
        return child
    }

    private static func spawn(_ words: [String]) throws -> (pid_t, Int32, Int32) {
        // No descriptor of the demo may reach a command: a command started later that inherited these
        // pipes would keep this command's output open (and the command "running") until it exited. The
        // pipes are close-on-exec, and every child closes all descriptors above 2 before it runs.
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw ShellError(code: errno, operation: "create a pipe") }
        var errorEnds: [Int32] = [0, 0]
        guard pipe(&errorEnds) == 0 else {
            for end in pipeEnds { close(end) }
            throw ShellError(code: errno, operation: "create a pipe")
        }
        for end in pipeEnds + errorEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        // A job reads nothing from the demo's own standard input (its commands, with --stdin). The
        // command runs in a process group of its own, which a timeout or a cancel kills.
        var spawned: Int32 = 0
        let started = ChildProcess.spawn(
            words[0],
            words,
            output: .descriptor(pipeEnds[1]),
            errors: .descriptor(errorEnds[1]),
            options: ChildProcess.Options(ownProcessGroup: true, defaultSignals: true),
            failure: &spawned
        )
        close(pipeEnds[1])
        close(errorEnds[1])
        guard let pid = started else {
            close(pipeEnds[0])
            close(errorEnds[0])
            throw ShellError(code: spawned, operation: "start \(words[0])")
        }
        return (pid, pipeEnds[0], errorEnds[0])
    }

    /// The command's result, once it has exited.
    func result() async -> Result {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Result? in
                if case .finished(let result) = state.outcome { return result }
                state.outcome = .waiting(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }

    private func finish(_ result: Result) {
        let waiting = state.withLock { state -> CheckedContinuation<Result, Never>? in
            defer { state.outcome = .finished(result) }
            if case .waiting(let continuation) = state.outcome { return continuation }
            return nil
        }
        waiting?.resume(returning: result)
    }

    /// Reads both outputs to their ends and waits for the exit (on the command's own thread).
    private static func waitForExit(_ process: Process) -> Result {
        let (output, errors) = readBoth(process)
        let pid = process.pid
        var status: Int32 = 0
        var waited: pid_t = -1
        repeat { waited = waitpid(pid, &status, 0) } while waited < 0 && errno == EINTR
        // Reaped elsewhere (it should not be: see `running`): say so rather than report success.
        let exit = waited < 0 ? 255 : (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        // Now that this command is reaped, reap what earlier commands left behind; under the lock that
        // spawning takes, so a command started meanwhile is never reaped here.
        running.withLock { running in
            running.remove(pid)
            ProcessTree.reapExited(except: running)
        }
        return (
            exit,
            String(decoding: output, as: UTF8.self).trimmingWhitespace(),
            String(decoding: errors, as: UTF8.self).trimmingWhitespace()
        )
    }

    /// Reads standard output (keeping its beginning) and standard error (keeping its end) until both
    /// are closed, then closes them.
    private static func readBoth(_ process: Process) -> (output: [UInt8], errors: [UInt8]) {
        var output: [UInt8] = []
        var errors: [UInt8] = []
        var open = [process.output, process.errors]
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while !open.isEmpty {
            var requests = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&requests, nfds_t(requests.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for request in requests where request.revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(request.fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    if request.fd == process.output {
                        if output.count < SystemShell.maximumOutput { output += buffer.prefix(count) }
                    } else {
                        errors += buffer.prefix(count)
                        if errors.count > SystemShell.maximumErrors {
                            errors.removeFirst(errors.count - SystemShell.maximumErrors)
                        }
                    }
                } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                    open.removeAll { $0 == request.fd }
                }
            }
        }
        close(process.output)
        close(process.errors)
        return (output, errors)
    }

    /// Kills the command and everything it started: its process group, every descendant, even one that
    /// left the group (`setsid`), and every process still holding its output pipes, even one whose
    /// parent exited (`setsid -f`, a double fork).
    func kill() {
        guard let process = state.withLock({ $0.process }) else { return }
        ProcessTree.killTree(of: process.pid, group: process.pid, holdingPipes: process.pipes)
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
