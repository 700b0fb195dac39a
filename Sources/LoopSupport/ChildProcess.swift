internal import Dispatch
internal import EventSources
internal import Synchronization

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Starts child processes: the one `posix_spawn` of the demo (its jobs and their guards), the benchmark
/// and the tests. Standard input from `/dev/null` (or a descriptor), standard output and error where
/// asked, and no other descriptor of this process: a child (a job, a server, a watchdog) that inherited
/// the write end of some pipe of this process would keep that pipe's reader from ever seeing its end.
package enum ChildProcess {
    /// Where a child's standard output (or error) goes.
    package enum Output: Sendable {
        /// To this process's own.
        case inherited
        /// Nowhere.
        case discarded
        /// To an open descriptor of this process.
        case descriptor(Int32)
        /// Appended to the file at this path (created if needed).
        case file(String)
    }

    /// How the child starts, beyond its descriptors.
    package struct Options: Sendable {
        /// In a process group of its own (its pid), which a signal to the group reaches whole.
        package var ownProcessGroup: Bool
        /// With no signal blocked (the spawning thread may block many: Swift's concurrency threads do,
        /// and a child inherits the mask) and SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE and SIGCHLD at
        /// their default actions.
        package var defaultSignals: Bool
        /// Killed (SIGKILL) when this process ends, however it ends: a test or benchmark killed
        /// mid-run leaves no server or node of its own running. The child is started through
        /// `setpriv --pdeathsig KILL` (util-linux), from a thread that lives as long as this process
        /// (Linux sends the signal when the *thread* that started the child ends, and the threads of
        /// Swift's pool and of Dispatch end when idle). Where `setpriv` is missing, the child starts
        /// as without this option. The child's `argv[0]` is then the executable's path.
        package var endsWithThisProcess: Bool

        /// Options; by default none.
        package init(ownProcessGroup: Bool = false, defaultSignals: Bool = false, endsWithThisProcess: Bool = false) {
            self.ownProcessGroup = ownProcessGroup
            self.defaultSignals = defaultSignals
            self.endsWithThisProcess = endsWithThisProcess
        }
    }

    /// Starts `executable` with `arguments` (the first is the executable's name, as `argv[0]`); its pid, or
    /// `nil` if it could not start (`errno`-style code in `failure`).
    ///
    /// - Parameters:
    ///   - input: a descriptor of this process the child reads as its standard input; `nil`: `/dev/null`.
    ///   - output: where its standard output goes.
    ///   - errors: where its standard error goes; `nil`: where its output goes.
    ///   - options: its process group and signals.
    package static func spawn(
        _ executable: String,
        _ arguments: [String],
        input: Int32? = nil,
        output: Output,
        errors: Output? = nil,
        options: Options = Options(),
        failure: inout Int32
    ) -> Int32? {
        guard options.endsWithThisProcess, let setpriv = Spawner.setpriv, let spawner = Spawner.shared else {
            return start(
                executable,
                arguments,
                input: input,
                output: output,
                errors: errors,
                options: options,
                failure: &failure
            )
        }
        // `setpriv` starts either way: an executable it cannot run is reported here, as without it.
        if executable.contains("/"), access(executable, X_OK) != 0 {
            failure = errno
            return nil
        }
        let words = [setpriv, "--pdeathsig", "KILL", "--", executable] + arguments.dropFirst()
        let started = spawner.run { () -> (Int32?, Int32) in
            var failure: Int32 = 0
            let pid = start(
                setpriv,
                words,
                input: input,
                output: output,
                errors: errors,
                options: options,
                failure: &failure
            )
            return (pid, failure)
        }
        // `run` answers with what the job returned; it has no answer only if the job never ran.
        guard let (pid, code) = started else {
            failure = EAGAIN
            return nil
        }
        failure = code
        return pid
    }

    /// ``spawn(_:_:input:output:errors:options:failure:)`` on the calling thread, as asked.
    private static func start(
        _ executable: String,
        _ arguments: [String],
        input: Int32?,
        output: Output,
        errors: Output?,
        options: Options,
        failure: inout Int32
    ) -> Int32? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let input {
            posix_spawn_file_actions_adddup2(&actions, input, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        direct(output, to: 1, &actions)
        if let errors {
            direct(errors, to: 2, &actions)
        } else if case .inherited = output {
        } else {
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        closeAllAboveStandardStreams(&actions)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var flags: Int32 = 0
        if options.ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
        }
        if options.defaultSignals {
            var noSignals = sigset_t()
            sigemptyset(&noSignals)
            posix_spawnattr_setsigmask(&attributes, &noSignals)
            var defaults = sigset_t()
            sigemptyset(&defaults)
            for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
            posix_spawnattr_setsigdefault(&attributes, &defaults)
            flags |= Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for word in argv { free(word) } }
        var pid: pid_t = 0
        failure = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        return failure == 0 ? pid : nil
    }

    /// Adds the actions sending descriptor `target` (1 or 2) to `output`.
    private static func direct(_ output: Output, to target: Int32, _ actions: inout posix_spawn_file_actions_t) {
        switch output {
        case .inherited: break
        case .discarded: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
        case .descriptor(let descriptor): posix_spawn_file_actions_adddup2(&actions, descriptor, target)
        case .file(let path):
            posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }
    }

    /// Adds actions closing every descriptor above 2 in the child: with `addclosefrom` where the C
    /// library has it, otherwise by listing the descriptors open now (one opened by another thread in
    /// between, without close-on-exec, could then still reach the child).
    private static func closeAllAboveStandardStreams(_ actions: inout posix_spawn_file_actions_t) {
        if let addCloseFrom, addCloseFrom(&actions, 3) == 0 { return }
        guard let directory = opendir("/proc/self/fd") else {
            for descriptor in 3..<Int32(1_024) where fcntl(descriptor, F_GETFD) >= 0 {
                posix_spawn_file_actions_addclose(&actions, descriptor)
            }
            return
        }
        var open: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let descriptor = Int32(name), descriptor > 2 { open.append(descriptor) }
        }
        let listing = dirfd(directory)
        closedir(directory)
        for descriptor in open where descriptor != listing {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
    }

    /// Sends `signal` to `pid` and waits for it to end; its raw wait status, or `nil` if this process
    /// could not wait for it (something else reaped it).
    @discardableResult
    package static func stop(_ pid: Int32, with signal: Int32) -> Int32? {
        kill(pid, signal)
        var status: Int32 = 0
        while true {
            if waitpid(pid, &status, 0) == pid { return status }
            if errno != EINTR { return nil }
        }
    }
}

/// The thread that starts every child that ends with this process: it never ends, so the children's
/// parent-death signal comes only when the process ends (see ``ChildProcess/Options/endsWithThisProcess``).
private final class Spawner: Sendable {
    /// The thread's queue, or `nil` if no thread could be started (children then start without the
    /// parent-death signal).
    static let shared: Spawner? = {
        let spawner = Spawner()
        let thread = OSThread({ spawner.serve() }, runHereIfUnavailable: false)
        thread.detach()
        return thread.started ? spawner : nil
    }()
    /// `setpriv`'s path, or `nil` where it is missing.
    static let setpriv: String? = ["/usr/bin/setpriv", "/bin/setpriv"].first { access($0, X_OK) == 0 }

    private let jobs = Mutex<[@Sendable () -> Void]>([])
    private let queued = DispatchSemaphore(value: 0)

    private init() {}

    /// The thread's body: runs the jobs as they come, forever.
    private func serve() -> Never {
        while true {
            queued.wait()
            let taken = jobs.withLock { jobs in
                defer { jobs = [] }
                return jobs
            }
            for job in taken { job() }
        }
    }

    /// Runs `job` on the thread and returns what it returned (`nil` only if it did not run: the job sets
    /// the result before it signals `done`, so this does not happen; the job is never run twice).
    func run<T: Sendable>(_ job: @escaping @Sendable () -> T) -> T? {
        let result = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        jobs.withLock {
            $0.append {
                result.withLock { $0 = job() }
                done.signal()
            }
        }
        queued.signal()
        done.wait()
        return result.withLock { $0 }
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
