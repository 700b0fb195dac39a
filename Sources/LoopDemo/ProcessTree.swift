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
        // Swift does not import the variadic `prctl`; it is called through its symbol with the four
        // integer arguments it reads, which Linux's x86-64 and arm64 calling conventions pass in the
        // same registers whether the callee is variadic or not.
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "prctl") else { return false }
        let prctl = unsafeBitCast(symbol, to: Prctl.self)
        let setChildSubreaper: Int32 = 36
        return prctl(setChildSubreaper, 1, 0, 0, 0) == 0
    }

    /// Reaps this process's children that have exited and are not in `waited` (whose exits someone
    /// else waits for): processes jobs left behind, re-parented here, which would otherwise stay
    /// zombies until the demo exits.
    public static func reapExited(except waited: Set<Int32>) {
        let me = getpid()
        for (pid, parent) in parents() where parent == me && !waited.contains(pid) && isZombie(pid) {
            var status: Int32 = 0
            _ = waitpid(pid, &status, WNOHANG)
        }
    }

    /// Whether `pid` has exited and waits to be reaped (state `Z` in its `stat`).
    static func isZombie(_ pid: pid_t) -> Bool {
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return false }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 1_024)
        let count = fread(&buffer, 1, buffer.count, file)
        let text = String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return false }
        return text[text.index(after: close)...].split(separator: " ").first == "Z"
    }

    /// The processes other than this one with a descriptor on one of the pipes `inodes` names.
    static func holders(of inodes: Set<UInt64>) -> [pid_t] {
        guard !inodes.isEmpty, let directory = opendir("/proc") else { return [] }
        defer { closedir(directory) }
        let me = getpid()
        var found: [pid_t] = []
        while let entry = readdir(directory) {
            guard let pid = pid_t(name(of: entry)), pid != me, let descriptors = opendir("/proc/\(pid)/fd") else {
                continue
            }
            defer { closedir(descriptors) }
            while let descriptor = readdir(descriptors) {
                var target = [CChar](repeating: 0, count: 64)
                let length = readlink("/proc/\(pid)/fd/\(name(of: descriptor))", &target, target.count - 1)
                guard length > 0 else { continue }
                let link = String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if link.hasPrefix("pipe:["), let inode = UInt64(link.dropFirst(6).dropLast()), inodes.contains(inode) {
                    found.append(pid)
                    break
                }
            }
        }
        return found
    }

    /// The inode of the pipe `descriptor` is an end of.
    static func pipeInode(_ descriptor: Int32) -> UInt64? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return UInt64(status.st_ino)
    }

    private static func name(of entry: UnsafeMutablePointer<dirent>) -> String {
        withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    /// Every process's parent, from `/proc/PID/stat`.
    static func parents() -> [(pid: pid_t, parent: pid_t)] {
        guard let directory = opendir("/proc") else { return [] }
        defer { closedir(directory) }
        var result: [(pid_t, pid_t)] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let pid = pid_t(name), let parent = parent(of: pid) else { continue }
            result.append((pid, parent))
        }
        return result
    }

    /// The parent of `pid`: the fourth field of its `stat`, after the command name in parentheses
    /// (which may itself hold spaces and parentheses, so it is found from the last one).
    static func parent(of pid: pid_t) -> pid_t? {
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 1_024)
        let count = fread(&buffer, 1, buffer.count, file)
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 1 else { return nil }
        return pid_t(fields[1])
    }
}
