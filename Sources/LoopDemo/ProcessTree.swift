#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// The processes below a process, read from `/proc`: how the demo finds, and kills, everything a job
/// started, even what left the job's process group (`setsid`).
public enum ProcessTree {
    /// Every live descendant of `root` (not `root` itself), read now.
    public static func descendants(of root: Int32) -> [Int32] {
        var children: [pid_t: [pid_t]] = [:]
        for (pid, parent) in parents() { children[parent, default: []].append(pid) }
        var found: [pid_t] = []
        var frontier = [root]
        while let next = frontier.popLast() {
            for child in children[next] ?? [] where !found.contains(child) {
                found.append(child)
                frontier.append(child)
            }
        }
        return found
    }

    /// Kills `root`'s process group, every descendant of `root`, and every other process holding one
    /// of the pipes `pipes` names (by inode: what holds a job's output open, even a process whose
    /// parent has exited, so that it is no longer a descendant), with `SIGKILL`, looking again (a few
    /// times) for processes they started meanwhile.
    public static func killTree(of root: Int32, group: Int32? = nil, holdingPipes pipes: Set<UInt64> = []) {
        var killed: Set<pid_t> = []
        for _ in 0..<5 {
            let found = (descendants(of: root) + holders(of: pipes)).filter { !killed.contains($0) }
            if let group { _ = kill(-group, SIGKILL) }
            for pid in found { _ = kill(pid, SIGKILL) }
            killed.formUnion(found)
            if found.isEmpty { return }
        }
    }

    /// Makes this process the "child subreaper" of its descendants (Linux `PR_SET_CHILD_SUBREAPER`): a
    /// process whose parent exits is re-parented to it rather than to PID 1, so it stays findable with
    /// ``descendants(of:)``. `false` where the system does not allow it.
    @discardableResult
    public static func becomeSubreaper() -> Bool {
        let setChildSubreaper: Int32 = 36
        return processControl(setChildSubreaper, 1)
    }

    /// Asks Linux to send this process `signal` when the thread that started it exits (its parent's
    /// death, `PR_SET_PDEATHSIG`). `false` where the system does not allow it.
    @discardableResult
    public static func signalOnParentDeath(_ signal: Int32) -> Bool {
        let setParentDeathSignal: Int32 = 1
        return processControl(setParentDeathSignal, UInt(signal))
    }

    /// `prctl(option, argument)`. Swift does not import the variadic `prctl`; it is called through its
    /// symbol with the four integer arguments it reads, which Linux's x86-64 and arm64 calling
    /// conventions pass in the same registers whether the callee is variadic or not.
    private static func processControl(_ option: Int32, _ argument: UInt) -> Bool {
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "prctl") else { return false }
        return unsafeBitCast(symbol, to: Prctl.self)(option, argument, 0, 0, 0) == 0
    }

    /// Whether this process is the "child subreaper" of its descendants (``becomeSubreaper()``).
    public static func isSubreaper() -> Bool {
        let getChildSubreaper: Int32 = 37
        var flag: Int32 = 0
        let asked = withUnsafeMutablePointer(to: &flag) { processControl(getChildSubreaper, UInt(bitPattern: $0)) }
        return asked && flag != 0
    }

    /// Reaps this process's children that have exited and are not in `waited` (whose exits someone
    /// else waits for): processes jobs left behind, re-parented here, which would otherwise stay
    /// zombies until the process exits. Only in a subreaper (the demo): anywhere else orphans are
    /// re-parented to PID 1, not here, and an exited child is someone else's (a test's server, a
    /// process another library started), whose exit status reaping it would steal.
    public static func reapExited(except waited: Set<Int32>) {
        guard isSubreaper() else { return }
        let me = getpid()
        for pid in pids() where !waited.contains(pid) {
            guard let found = status(of: pid), found.parent == me, found.state == "Z" else { continue }
            var exit: Int32 = 0
            _ = waitpid(pid, &exit, WNOHANG)
        }
    }

    /// The processes other than this one with a descriptor on one of the pipes `inodes` names.
    static func holders(of inodes: Set<UInt64>) -> [pid_t] {
        guard !inodes.isEmpty else { return [] }
        let me = getpid()
        return pids().filter { pid in
            pid != me
                && (FileSystem.entries(of: "/proc/\(pid)/fd") ?? []).contains { descriptor in
                    var target = [CChar](repeating: 0, count: 64)
                    let length = readlink("/proc/\(pid)/fd/\(descriptor)", &target, target.count - 1)
                    guard length > 0 else { return false }
                    let link = String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    guard link.hasPrefix("pipe:["), let inode = UInt64(link.dropFirst(6).dropLast()) else {
                        return false
                    }
                    return inodes.contains(inode)
                }
        }
    }

    /// The inode of the pipe `descriptor` is an end of.
    static func pipeInode(_ descriptor: Int32) -> UInt64? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return UInt64(status.st_ino)
    }

    /// Every process's parent, from `/proc/PID/stat`.
    static func parents() -> [(pid: pid_t, parent: pid_t)] {
        pids().compactMap { pid in status(of: pid).map { (pid, $0.parent) } }
    }

    /// Every process in `/proc`.
    static func pids() -> [pid_t] {
        (FileSystem.entries(of: "/proc") ?? []).compactMap { pid_t($0) }
    }

    /// The state letter (`R`, `S`, `Z`, …) and parent of `pid`: the third and fourth fields of its
    /// `stat`, after the command name in parentheses (which may itself hold spaces and parentheses, so
    /// it is found from the last one).
    static func status(of pid: pid_t) -> (state: Substring, parent: pid_t)? {
        let text = String(decoding: FileSystem.bytes(at: "/proc/\(pid)/stat"), as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 1, let parent = pid_t(fields[1]) else { return nil }
        return (fields[0], parent)
    }
}
