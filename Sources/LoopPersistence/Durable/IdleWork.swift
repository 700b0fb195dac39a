internal import Dispatch
internal import EventSources
internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#endif

/// Work that may wait for an idle processor: durable loops encode their snapshots here, on one thread
/// of the process that the kernel runs only when no other thread wants the processor (`SCHED_IDLE`;
/// the lowest `nice` where that is refused).
///
/// A snapshot's encoding is the largest piece of work a durable loop does besides its events, and it
/// grows with the state: on the request path's threads it made every request of the batches around it
/// wait (w15: p99 3-4x the p99 without snapshots; on this thread, 1.4-1.8x). Under a sustained full
/// load the thread still runs, slowly (the kernel gives an idle thread a small share), so snapshots
/// come late but come; their events are durable meanwhile, so nothing waits for them but recovery's
/// length.
@usableFromInline
final class IdleWork: Sendable {
    /// The process's one idle thread, started on first use.
    @usableFromInline
    static let shared = IdleWork()

    private let jobs = Locked<[@Sendable () -> Void]>([])
    private let signal = DispatchSemaphore(value: 0)

    private init() {
        let (jobs, signal) = (self.jobs, self.signal)
        let thread = OSThread(
            {
                IdleWork.lowerPriority()
                while true {
                    signal.wait()
                    let job = jobs.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                    job?()
                }
            },
            runHereIfUnavailable: false
        )
        // No thread could be started: each job then runs where it is asked for (see `run`).
        if thread.started { thread.detach() }
        started = thread.started
    }

    private let started: Bool

    /// Runs `body` on the idle thread and returns its result.
    @usableFromInline
    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        guard started else { return body() }
        return await withCheckedContinuation { continuation in
            jobs.withLock { $0.append { continuation.resume(returning: body()) } }
            signal.signal()
        }
    }

    /// Puts the calling thread where only idle processors run it.
    private static func lowerPriority() {
        var parameters = sched_param()
        // SCHED_IDLE (5 on Linux; Glibc's module does not export the name).
        if sched_setscheduler(0, 5, &parameters) != 0 {
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        }
    }
}
