internal import Dispatch
internal import EventSources
internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#endif

/// Work that may wait for an idle processor: durable loops encode their snapshots here, on one thread
/// of the process at the lowest priority (`nice` 19), which the kernel runs when a processor is idle
/// and otherwise gives only a small share.
///
/// A snapshot's encoding is the largest piece of work a durable loop does besides its events, and it
/// grows with the state: on the request path's threads it made every request of the batches around it
/// wait (w15: p99 3-4x the p99 without snapshots; on this thread, 1.0-1.9x). Under a sustained full
/// load the thread still runs, slowly, so snapshots come late but come; their events are durable
/// meanwhile, so nothing waits for them but recovery's length, and a newer snapshot of a stream
/// replaces one still waiting, so they do not pile up.
@usableFromInline
package final class IdleWork: Sendable {
    /// The process's one idle thread, started on first use.
    @usableFromInline
    package static let shared = IdleWork()

    /// A job: run (`true`) or dropped for a newer one of the same key (`false`).
    private typealias Job = (key: String?, run: @Sendable (Bool) -> Void)

    private let jobs = Locked<[Job]>([])
    private let signal = DispatchSemaphore(value: 0)

    private init() {
        let (jobs, signal) = (self.jobs, self.signal)
        let thread = OSThread(
            {
                IdleWork.lowerPriority()
                while true {
                    signal.wait()
                    let job = jobs.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                    job?.run(true)
                }
            },
            runHereIfUnavailable: false
        )
        // No thread could be started: each job then runs where it is asked for (see `run`).
        if thread.started { thread.detach() }
        started = thread.started
    }

    private let started: Bool

    /// Whether a job of `key` waits for the thread. For tests.
    package func isQueued(_ key: String) -> Bool { jobs.withLock { $0.contains { $0.key == key } } }

    /// Runs `body` on the idle thread and returns its result; or, if a newer job with the same `key`
    /// arrives before this one ran, returns `nil` without running it. A busy processor delays the thread,
    /// so a stream's snapshots do not pile up behind it: only its newest waits.
    @usableFromInline
    package func run<T: Sendable>(key: String? = nil, _ body: @escaping @Sendable () -> T) async -> T? {
        guard started else { return body() }
        return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
            let superseded = jobs.withLock { jobs -> Job? in
                let job: Job = (key, { run in continuation.resume(returning: run ? body() : nil) })
                if let key, let index = jobs.firstIndex(where: { $0.key == key }) {
                    defer { jobs[index] = job }
                    return jobs[index]
                }
                jobs.append(job)
                return nil
            }
            // A job replaced keeps the queue's length: the thread is woken once per job in the queue.
            if let superseded { superseded.run(false) } else { signal.signal() }
        }
    }

    /// Gives the calling thread the lowest priority of normal scheduling (`nice` 19): the kernel then runs
    /// it mostly on idle processors, but still gives it a small share of a busy one, so snapshots come
    /// late under load, never not at all (`SCHED_IDLE` starved them for seconds while tests ran in parallel).
    private static func lowerPriority() {
        // On Linux the `nice` of a thread is its own: `PRIO_PROCESS` with 0 names the calling thread.
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
    }
}
