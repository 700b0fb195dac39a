internal import Dispatch
internal import EventSources
internal import LoopRuntime
internal import Synchronization

#if canImport(Glibc)
internal import Glibc
#endif

/// Work that may wait for an idle processor: durable loops encode their snapshots here, on one thread
/// of the process that the kernel runs only on an idle processor (`SCHED_IDLE`), raised to the lowest
/// normal priority (`nice` 19) while a job has waited a second.
///
/// A snapshot's encoding is the largest piece of work a durable loop does besides its events, and it
/// grows with the state: on the request path's threads it made every request of the batches around it
/// wait (w15: p99 3-4x the p99 without snapshots). At `nice` 19 the thread still took whole time slices
/// of a busy processor now and then, milliseconds in which that processor's requests waited; under
/// `SCHED_IDLE` it takes none, but under a sustained full load it ran for seconds at a time not at all,
/// so a job that has waited a second raises it to `nice` 19 until the queue is empty: snapshots come
/// late under load, never not at all. Their events are durable meanwhile, so nothing waits for them but
/// recovery's length, and a newer snapshot of a stream replaces one still waiting, so they do not pile
/// up. Where the process may not leave `SCHED_IDLE` again (no `CAP_SYS_NICE`, `RLIMIT_NICE` below 1),
/// the thread stays at `nice` 19.
///
/// An append's effect ends once its snapshot is saved, so what waits for a loop's effects to end waits
/// for its snapshots too: a graceful stop (and a test that waits for the loop to settle). A stop should
/// not wait for idle processors, nor behind other loops' snapshots: a stopping loop ``hurry(_:)``s its
/// jobs, which then run at once on the tasks that wait for them, at their priority. A job the thread has
/// begun finishes there.
@usableFromInline
package final class IdleWork: Sendable {
    /// The process's one idle thread, started on first use.
    @usableFromInline
    package static let shared = IdleWork()

    /// Whose jobs these are: one per durable loop or group, so that its stop can ``IdleWork/hurry(_:)``
    /// them, and so that only its own newer job of a key replaces one still waiting.
    @usableFromInline
    package final class Owner: Sendable {
        /// Whether its jobs run at once where they are asked for.
        fileprivate let hurried = Atomic<Bool>(false)

        /// A new owner, whose jobs wait for the idle thread until it is hurried.
        @usableFromInline
        package init() {}
    }

    /// What becomes of a job.
    private enum Fate {
        /// The idle thread runs it.
        case run
        /// A newer job of its owner and key took its place.
        case superseded
        /// Its owner was hurried: the task waiting for it runs it.
        case handedBack
    }

    /// A job, with its owner and key.
    private struct Job {
        var owner: Owner?
        var key: String?
        var run: @Sendable (Fate) -> Void
    }

    /// What a waiting task gets back.
    private enum Outcome<T: Sendable>: Sendable {
        case ran(T)
        case superseded
        case handedBack
    }

    private struct Thread {
        var jobs: [Job] = []
        /// The thread, once it runs.
        var id: pthread_t?
        /// Whether a job waited too long under `SCHED_IDLE`: the thread runs under `SCHED_OTHER` (at `nice`
        /// 19) until its queue is empty. Set before the thread changes, so it can look again after a change.
        var raised = false
        /// Whether it may go to `SCHED_IDLE` and come back.
        var idles = false
        /// Whether it runs a job now.
        var busy = false
    }

    private let thread = Locked(Thread())
    private let signal = DispatchSemaphore(value: 0)
    /// How long a job waits under `SCHED_IDLE` before the thread is raised to `nice` 19.
    private let patience: DispatchTimeInterval

    /// A thread of its own, raised once a job has waited `patience`; the process's is ``shared`` (a test
    /// makes its own, so other tests' snapshots do not change what it sees).
    package init(patience: Duration = .seconds(1)) {
        let (seconds, attoseconds) = patience.components
        self.patience = .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
        let (state, signal) = (self.thread, self.signal)
        let started = OSThread(
            {
                let idles = Self.mayReturnFromIdle()
                // On Linux the `nice` of a thread is its own: `PRIO_PROCESS` with 0 names the calling
                // thread. It stays 19 under every policy this thread takes.
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
                // The thread goes idle before it is known to `raise`, then looks whether a job asked for
                // it meanwhile: a raise that came before this (a job that waited while the thread was
                // being started) is not undone by it.
                if idles { Self.schedule(pthread_self(), idle: true) }
                let raised = state.withLock {
                    $0.id = pthread_self()
                    $0.idles = idles
                    return $0.raised
                }
                if idles, raised { Self.schedule(pthread_self(), idle: false) }
                while true {
                    signal.wait()
                    let job = state.withLock { thread -> Job? in
                        guard !thread.jobs.isEmpty else { return nil }
                        thread.busy = true
                        return thread.jobs.removeFirst()
                    }
                    job?.run(.run)
                    // The queue is empty: back to waiting for idle processors only.
                    let lower = state.withLock { thread -> Bool in
                        thread.busy = false
                        guard thread.raised, thread.jobs.isEmpty else { return false }
                        thread.raised = false
                        return thread.idles
                    }
                    guard lower else { continue }
                    Self.schedule(pthread_self(), idle: true)
                    // A raise between the lock above and that change set the thread's policy before it
                    // (and was undone by it) or sets it after; either way it has marked the thread
                    // raised first, so looking again after the change finds every raise it undid. (The
                    // thread never holds the lock while it is idle: a busy processor could keep it
                    // there, and every `run` with it.)
                    if state.withLock({ $0.raised }) { Self.schedule(pthread_self(), idle: false) }
                }
            },
            runHereIfUnavailable: false
        )
        // No thread could be started: each job then runs where it is asked for (see `run`).
        if started.started { started.detach() }
        self.started = started.started
    }

    private let started: Bool

    /// Whether the thread may use `SCHED_IDLE`, and the policy it has now (5: `SCHED_IDLE`, 0:
    /// `SCHED_OTHER`; `nil` before it runs). For tests.
    package var scheduling: (idles: Bool, policy: Int32?) {
        let (idles, id) = thread.withLock { ($0.idles, $0.id) }
        guard let id else { return (idles, nil) }
        var policy: Int32 = -1
        var parameters = sched_param()
        return (idles, pthread_getschedparam(id, &policy, &parameters) == 0 ? policy : nil)
    }

    /// Whether a job of `key` waits for the thread. For tests.
    package func isQueued(_ key: String) -> Bool { thread.withLock { $0.jobs.contains { $0.key == key } } }

    /// How many of `owner`'s jobs wait for the thread. For tests.
    package func queued(of owner: Owner) -> Int { thread.withLock { $0.jobs.count { $0.owner === owner } } }

    /// Runs `body` on the idle thread and returns its result; or, if a newer job of the same `owner` and
    /// `key` arrives before this one ran, returns `nil` without running it. A busy processor delays the
    /// thread, so a stream's snapshots do not pile up behind it: only its newest waits. Once `owner` is
    /// hurried, `body` runs here, at once.
    @usableFromInline
    package func run<T: Sendable>(
        owner: Owner? = nil,
        key: String? = nil,
        _ body: @escaping @Sendable () -> T
    ) async -> T? {
        guard started, owner?.hurried.load(ordering: .acquiring) != true else { return body() }
        let done = Done()
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Outcome<T>, Never>) in
            let job = Job(owner: owner, key: key) { fate in
                switch fate {
                case .run: continuation.resume(returning: .ran(body()))
                case .superseded: continuation.resume(returning: .superseded)
                case .handedBack: continuation.resume(returning: .handedBack)
                }
            }
            let (superseded, queued) = thread.withLock { thread -> (Job?, Bool) in
                // Looked at again under the lock: a hurry takes the owner's jobs under it after marking
                // the owner, so a job is either taken by it or never queued.
                if owner?.hurried.load(ordering: .acquiring) == true { return (nil, false) }
                if let key, let index = thread.jobs.firstIndex(where: { $0.key == key && $0.owner === owner }) {
                    defer { thread.jobs[index] = job }
                    return (thread.jobs[index], true)
                }
                thread.jobs.append(job)
                return (nil, true)
            }
            guard queued else { return job.run(.handedBack) }
            // A job replaced keeps the queue's length: the thread is woken once per job in the queue.
            if let superseded { superseded.run(.superseded) } else { signal.signal() }
            // The timer holds the thread's state, not this object: no weak reference outlives a test.
            let thread = self.thread
            DispatchQueue.global().asyncAfter(deadline: .now() + patience) {
                if !done.flag.load(ordering: .acquiring) { Self.raise(thread) }
            }
        }
        done.flag.store(true, ordering: .releasing)
        switch outcome {
        case .ran(let result): return result
        case .superseded: return nil
        case .handedBack: return body()
        }
    }

    /// Hurries `owner`'s jobs: those waiting for the thread are handed back to the tasks that wait for
    /// them, which run them at once, and later ones run where they are asked for. A job the thread runs
    /// already finishes there. For a loop that stops: its stop waits for its snapshots, not for idle
    /// processors or other loops' snapshots.
    @usableFromInline
    package func hurry(_ owner: Owner) {
        owner.hurried.store(true, ordering: .releasing)
        let taken = thread.withLock { thread -> [Job] in
            let taken = thread.jobs.filter { $0.owner === owner }
            if !taken.isEmpty { thread.jobs.removeAll { $0.owner === owner } }
            return taken
        }
        // The thread may be woken once more than there are jobs: it finds the queue empty and waits again.
        for job in taken { job.run(.handedBack) }
    }

    /// A job has waited `patience` under `SCHED_IDLE`: the thread gets `nice` 19 until its queue is empty.
    /// Marked raised even before the thread runs (it raises itself when it starts) and where it cannot
    /// idle (nothing to change then).
    private static func raise(_ thread: Locked<Thread>) {
        let id = thread.withLock { thread -> pthread_t? in
            guard !thread.raised, thread.busy || !thread.jobs.isEmpty else { return nil }
            thread.raised = true
            return thread.idles ? thread.id : nil
        }
        if let id { Self.schedule(id, idle: false) }
    }

    /// Whether this process may move a thread out of `SCHED_IDLE` again: to `SCHED_OTHER` at `nice`
    /// 19, which takes `CAP_SYS_NICE` (root has it) or an `RLIMIT_NICE` of at least 1.
    private static func mayReturnFromIdle() -> Bool {
        var limit = rlimit()
        // RLIMIT_NICE is 13 on Linux (<bits/resource.h>, not imported).
        guard getrlimit(__rlimit_resource_t(13), &limit) == 0 else { return geteuid() == 0 }
        return geteuid() == 0 || limit.rlim_cur >= 1
    }

    /// Puts thread `id` under `SCHED_IDLE`, or back under `SCHED_OTHER` (at the `nice` 19 it keeps). A
    /// refused change leaves the thread as it was.
    private static func schedule(_ id: pthread_t, idle: Bool) {
        var parameters = sched_param(sched_priority: 0)
        // SCHED_IDLE is 5 on Linux (<sched.h>, not imported); SCHED_OTHER is 0.
        _ = pthread_setschedparam(id, idle ? 5 : 0, &parameters)
    }

    /// Whether a job has finished, for the timer that raises the thread.
    private final class Done: Sendable {
        let flag = Atomic<Bool>(false)
    }
}
