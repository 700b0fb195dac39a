#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Starts a child process for tests, benchmarks and demos: standard input from `/dev/null` (or a pipe), standard
/// output and error to a file (or `/dev/null`, or this process's own), and no other descriptor of this
/// process. A child (a server, a watchdog) that inherited the write end of some pipe of this process
/// would keep that pipe's reader from ever seeing its end.
package enum ChildProcess {
    /// Where a child's standard output and error go.
    package enum Output {
        /// To this process's own.
        case inherited
        /// Nowhere.
        case discarded
        /// To an open descriptor of this process.
        case descriptor(Int32)
        /// Appended to the file at this path (created if needed).
        case file(String)
    }

    /// Starts `executable` with `arguments` (the first is the program's name, as `argv[0]`); its pid, or
    /// `nil` if it could not start (`errno`-style code in `failure`).
    ///
    /// `input`, when given, is a descriptor of this process the child reads as its standard input.
    package static func spawn(
        _ executable: String,
        _ arguments: [String],
        input: Int32? = nil,
        output: Output,
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
        switch output {
        case .inherited:
            break
        case .discarded:
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        case .descriptor(let descriptor):
            posix_spawn_file_actions_adddup2(&actions, descriptor, 1)
            posix_spawn_file_actions_adddup2(&actions, descriptor, 2)
        case .file(let path):
            posix_spawn_file_actions_addopen(&actions, 1, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        if addCloseFrom?(&actions, 3) != 0 {
            for descriptor in 3..<Int32(1_024) where fcntl(descriptor, F_GETFD) >= 0 {
                posix_spawn_file_actions_addclose(&actions, descriptor)
            }
        }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for word in argv { free(word) } }
        var pid: pid_t = 0
        failure = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        return failure == 0 ? pid : nil
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
