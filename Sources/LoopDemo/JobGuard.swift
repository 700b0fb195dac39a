internal import LoopSupport

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// The small process between the demo and each job's shell, which makes a job die with the demo even
/// when the demo is killed with SIGKILL (and so can do nothing itself).
///
/// `loop-demo` starts each job as `loop-demo --job-guard PID /bin/sh -c COMMAND`. The guard:
///
/// 1. asks Linux for SIGTERM when the demo's thread that started it ends (`PR_SET_PDEATHSIG`); the
///    demo starts it from the thread that waits for the job, which lives until the job is reaped;
/// 2. becomes the subreaper of the job's processes, so one that leaves the job's process group or
///    whose parent exits (`setsid`, a double fork) is re-parented to the guard and stays findable;
/// 3. runs the command in its own process group (the job's group, which the demo kills on a timeout
///    or a cancel) and waits for it;
/// 4. exits as the command did (the same status, or the same signal), so the demo sees no difference;
///    on SIGTERM, SIGINT or SIGHUP (the demo died) it first kills every process below it.
public enum JobGuard {
    /// The first argument that selects the guard.
    public static let flag = "--job-guard"

    /// Runs the guard for `command` (`/bin/sh -c ...`) on behalf of the demo process `parent`; never
    /// returns.
    public static func run(parent: Int32, command: [String]) -> Never {
        let stops = [SIGTERM, SIGINT, SIGHUP]
        var waited = sigset_t()
        sigemptyset(&waited)
        for signal in stops + [SIGCHLD] { sigaddset(&waited, signal) }
        // Blocked before asking for the parent-death signal, so it is waited for, never missed.
        pthread_sigmask(SIG_BLOCK, &waited, nil)
        ProcessTree.signalOnParentDeath(SIGTERM)
        // The demo may have died before the request took effect: then nothing would ever signal.
        guard getppid() == parent else { _exit(128 + SIGTERM) }
        ProcessTree.becomeSubreaper()
        guard let child = spawn(command) else { _exit(127) }
        while true {
            var signal: Int32 = 0
            guard sigwait(&waited, &signal) == 0 else { continue }
            if stops.contains(signal) {
                // Everything below the guard, found in /proc (the guard is the subreaper of the job's
                // processes, so all of them are below it); not the job's group, which holds the guard.
                ProcessTree.killTree(of: getpid())
                _exit(128 + signal)
            }
            // SIGCHLD: reap whatever ended; the command's end ends the guard.
            var status: Int32 = 0
            while true {
                let ended = waitpid(-1, &status, WNOHANG)
                if ended <= 0 { break }
                if ended == child { exitAs(status) }
            }
        }
    }

    /// Exits with the command's status, or dies of its signal.
    private static func exitAs(_ status: Int32) -> Never {
        let number = status & 0x7f
        guard number != 0 else { _exit((status >> 8) & 0xff) }
        var only = sigset_t()
        sigemptyset(&only)
        sigaddset(&only, number)
        signal(number, SIG_DFL)
        pthread_sigmask(SIG_UNBLOCK, &only, nil)
        raise(number)
        _exit(128 + number)
    }

    /// Starts `command` in the guard's process group, with no signal blocked and the usual ones at
    /// their defaults, and no descriptor above 2.
    private static func spawn(_ command: [String]) -> pid_t? {
        guard let path = command.first else { return nil }
        var failure: Int32 = 0
        // Its output and error are the guard's (the job's pipes); its input, /dev/null, is the guard's too.
        return ChildProcess.spawn(
            path,
            command,
            output: .inherited,
            options: ChildProcess.Options(defaultSignals: true),
            failure: &failure
        )
    }
}
