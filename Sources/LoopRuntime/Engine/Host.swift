/// Where a loop's (or a group of loops') asynchronous work runs, and the signal that ends `run()`.
///
/// Effects are started by whichever thread processed their event; the host is the hand-over. A posted
/// job goes into a queue that **runners** take from: child tasks of one task group, each taking jobs one
/// after another until the queue is empty, then ending. While jobs wait, at least one runner is on its
/// way, and as many as are already at work (up to one per waiting job): a runner that takes a job and
/// leaves others queued asks for more. So a queued job never waits behind a job that runs (however long
/// that one takes), a backlog doubles its runners at each turn, yet a burst of quick jobs shares a few
/// tasks instead of creating one per job: a task per effect was the ceiling of the asynchronous round
/// trip (see Performance.md).
///
/// The **hosting task** owns the group and takes commands: add runners, stop, the deadline, the end. The
/// host of `run()` starts it from `run()`'s task (so effects inherit its task-local values and priority)
/// and keeps it to the end. Any other host (a loop started with `start()`) starts it, detached, with the
/// first command, and it ends when no runner and no source runs and no command waits: a started loop
/// with nothing running costs no task. (A suspended task is about 1.7 KB; an idle started loop is
/// smaller than that.)
///
/// `run()` does not await the group itself: it waits for ``end()``, which comes when the group has
/// finished after a graceful shutdown, at the end of the grace period, or at once when the task running
/// `run()` is cancelled. A handler that ignores cancellation therefore cannot hold `run()`: its loop
/// reports it abandoned, and the hosting task finishes in the background whenever the handler does.
@usableFromInline
final class Host: Sendable {
    /// Work for the group, and what to do instead if the host has closed and can no longer run it.
    @usableFromInline
    struct Job: Sendable {
        @usableFromInline
        var run: @Sendable () async -> Void
        @usableFromInline
        var cancel: @Sendable () -> Void

        @inlinable
        init(run: @escaping @Sendable () async -> Void, cancel: @escaping @Sendable () -> Void) {
            self.run = run
            self.cancel = cancel
        }
    }

    /// What the hosting task does at each turn of a shutdown; each is called on the hosting task.
    struct Shutdown: Sendable {
        /// Graceful shutdown began (sources are to stop).
        var stopping: @Sendable () -> Void
        /// The grace period is over: stop every member at once.
        var deadline: @Sendable () -> Void
        /// The task running `run()` was cancelled: stop every member at once.
        var cancelled: @Sendable () -> Void
    }

    /// The host's state machine: every change to it is one of its inputs, and what it returns is carried
    /// out here once the lock is released.
    private typealias Machine = HostMachine<
        Job, CheckedContinuation<HostCommand?, Never>, CheckedContinuation<Void, Never>
    >

    private let machine: Locked<Machine>
    private let clock: any Clock<Duration>

    /// A host whose shutdown takes the turns of `shutdown`, timed on `clock`, with `members` loops on it
    /// from the start.
    init(
        clock: any Clock<Duration>,
        shutdown: Shutdown = Shutdown(stopping: {}, deadline: {}, cancelled: {}),
        members: Int = 0
    ) {
        self.clock = clock
        machine = Locked(Machine(shutdown: shutdown, members: members))
    }

    /// Runs `job` as soon as a runner gets to it; cancels it at once if the host has closed.
    @usableFromInline
    func spawn(_ job: Job) {
        let (wake, refused) = machine.withLock { $0.spawn(job) }
        carryOut(wake)
        refused?.cancel()
    }

    /// Asks for a graceful stop within `gracePeriod`; the shortest asked for wins.
    @usableFromInline
    func askToStop(gracePeriod: Duration) {
        let (wake, startDeadline) = machine.withLock { $0.askToStop(gracePeriod: gracePeriod) }
        carryOut(wake)
        // The hosting task no longer takes commands (every member stopped; it waits for a source that
        // ignores cancellation): the deadline must still come.
        if startDeadline { self.startDeadline(after: gracePeriod) }
    }

    /// The task running `run()` was cancelled. Once the hosting task no longer takes commands (every
    /// member stopped, the group waiting for a source), `run()`'s wait ends at once.
    @usableFromInline
    func cancel() {
        let (wake, endNow) = machine.withLock { $0.cancel() }
        carryOut(wake)
        if endNow { end() }
    }

    /// A loop runs on this host from now on.
    @usableFromInline
    func join() {
        machine.withLock { $0.join() }
    }

    /// A loop has stopped; once every member has left after a stop was asked for, the host is done.
    @usableFromInline
    func leave() {
        carryOut(machine.withLock { $0.leave() })
    }

    private func carryOut(_ wake: Machine.Wake) {
        switch wake {
        case .none: break
        case .resume(let waiter, let command): waiter.resume(returning: command)
        case .launch:
            // Detached: a hosting task started from an effect or a request must not pass its task-local
            // values (such as an idempotency key) on to every effect run after it. (The host of `run()`
            // starts its task from `run()` instead, and keeps it.)
            Task.detached { await self.host() }
        }
    }

    /// Ends `run()`'s wait; the first call counts.
    func end() {
        let (waiters, timers) = machine.withLock { $0.end() }
        for timer in timers { timer.cancel() }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once ``end()`` has been called. Not cancellable: `run()` cancels through ``cancel()``, and
    /// returns only once that has been carried out (members stopped, effects cancelled).
    func ended() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if machine.withLock({ $0.awaitEnd(continuation) }) { continuation.resume() }
        }
    }

    /// Whether a hosting task runs (or is about to).
    var hasTask: Bool {
        machine.withLock { $0.hasTask }
    }

    /// Starts the hosting task now, from the caller's task, and keeps it until the end: for `run()`, so
    /// effects run in tasks that inherit its task-local values and priority, as child tasks would.
    func launchKeepingTask() {
        if machine.withLock({ $0.launchKeepingTask() }) { Task { await self.host() } }
    }

    /// Runs `sources` until the shutdown begins; not if it has begun already.
    func startSources(_ sources: @escaping @Sendable () async -> Void) {
        carryOut(machine.withLock { $0.startSources(sources) })
    }

    /// The hosting task: runs the sources and the runners asked for, takes commands until the shutdown is
    /// complete or nothing is left to coordinate.
    private func host() async {
        let final = await withDiscardingTaskGroup { group -> Bool in
            await coordinate(group: &group)
        }
        if final { end() }
    }

    /// Takes commands until the last one (`true`) or until there is nothing to coordinate (`false`).
    private func coordinate(group: inout DiscardingTaskGroup) async -> Bool {
        while let command = await next() {
            switch command {
            case .startSources(let sources):
                group.addTask {
                    await sources()
                    self.carryOut(self.machine.withLock { $0.sourcesEnded() })
                }
            case .addRunners(let count):
                for _ in 0..<count { group.addTask { await self.runJobs() } }
            case .stop(let gracePeriod):
                shutdown?.stopping()
                startDeadline(after: gracePeriod)
            case .deadline:
                shutdown?.deadline()
                finish(&group)
                end()
                return true
            case .quiescent:
                shutdown?.stopping()
                finish(&group)
                return true
            case .cancelled:
                shutdown?.cancelled()
                finish(&group)
                end()
                return true
            }
        }
        return false
    }

    /// The shutdown's turns, while it is not over.
    private var shutdown: Shutdown? {
        machine.withLock { $0.shutdown }
    }

    /// Closes the host after the last command: jobs not started and running ones are cancelled. A
    /// deadline or cancellation that comes later ends `run()`'s wait at once.
    private func finish(_ group: inout DiscardingTaskGroup) {
        let (leftovers, pending) = machine.withLock { $0.finish() }
        for job in leftovers { job.cancel() }
        group.cancelAll()
        // A deadline or cancellation posted after the last command was taken, before the host closed, is
        // not lost.
        if pending { end() }
    }

    /// A runner: takes jobs one after another until the queue is empty.
    private func runJobs() async {
        var first = true
        while let job = nextJob(first: first) {
            first = false
            await job.run()
        }
    }

    /// The next job for a runner (`first`: its first), asking for another runner if more jobs wait; `nil`
    /// when there is none, and the runner ends.
    private func nextJob(first: Bool) -> Job? {
        let (job, wake) = machine.withLock { $0.nextJob(first: first) }
        carryOut(wake)
        return job
    }

    /// Starts a grace period's timer: one for each stop asked for, so a later stop with a shorter grace
    /// period brings the deadline forward; the first to fire counts. When one fires after the hosting
    /// task stopped taking commands (every member stopped, and the group is waiting for a source that
    /// ignores cancellation), it ends `run()`'s wait itself.
    private func startDeadline(after gracePeriod: Duration) {
        let clock = self.clock
        let timer = Task.detached {
            do { try await clock.sleep(for: gracePeriod) } catch { return }
            // Decided in the same hold of the lock as the change, so the hosting task cannot stop taking
            // commands in between and leave the deadline unheard.
            let (wake, endNow) = self.machine.withLock { $0.deadlineFired() }
            self.carryOut(wake)
            if endNow { self.end() }
        }
        if !machine.withLock({ $0.keep(timer) }) { timer.cancel() }
    }

    /// The next command, waiting for one if there is none; `nil` when nothing is left to coordinate (the
    /// hosting task then ends, and the next command starts a new one).
    private func next() async -> HostCommand? {
        await withCheckedContinuation { (continuation: CheckedContinuation<HostCommand?, Never>) in
            if let ready = machine.withLock({ $0.next(continuation) }) { continuation.resume(returning: ready) }
        }
    }
}
