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
        var abandon: @Sendable () -> Void

        @inlinable
        init(run: @escaping @Sendable () async -> Void, abandon: @escaping @Sendable () -> Void) {
            self.run = run
            self.abandon = abandon
        }
    }

    /// What the hosting task is told to do next.
    enum Command {
        case startSources(@Sendable () async -> Void)
        case addRunners(Int)
        case stop(gracePeriod: Duration)
        case deadline
        case quiescent
        case cancelled
    }

    /// Whether a hosting task runs, and what it does.
    private enum Phase {
        /// No hosting task: nothing to coordinate. The next command starts one.
        case dormant
        /// The hosting task takes commands.
        case coordinating
        /// The hosting task has taken its last command (the shutdown is complete, or cut short) and only
        /// waits for its group's tasks to finish.
        case closing
    }

    /// Jobs in the order they were posted. A job handed out leaves its slot at once, so what it holds
    /// (its loop, its effect) is not kept until the queue next empties.
    private struct Queue {
        private var jobs: [Job?] = []
        private var head = 0

        var isEmpty: Bool { head == jobs.count }

        var count: Int { jobs.count - head }

        mutating func append(_ job: Job) { jobs.append(job) }

        mutating func removeFirst() -> Job? {
            guard head < jobs.count else { return nil }
            let job = jobs[head].take()
            head += 1
            if head == jobs.count {
                removeAll()
            } else if head >= 1_024 && head * 2 >= jobs.count {
                // Under a backlog that never empties, the slots handed out do not accumulate.
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }

        /// Empties the queue; returns what was in it.
        @discardableResult
        mutating func removeAll() -> [Job] {
            defer {
                // A queue that grew in a burst does not keep its storage while idle.
                jobs.removeAll(keepingCapacity: jobs.capacity <= 16)
                head = 0
            }
            return jobs[head...].compactMap { $0 }
        }
    }

    private struct Mailbox {
        var queue = Queue()
        /// Runners alive, including those asked for and not yet added to the group.
        var runners = 0
        /// Runners asked for that the hosting task has not added yet.
        var runnersToAdd = 0
        /// Runners on their way: asked for, and not yet at their first job.
        var runnersComing = 0
        /// Whether the hosting task stays until the end instead of ending when nothing runs: the host of
        /// `run()`, whose task the effects' runners inherit task-local values and priority from.
        var keepsTask = false
        /// The sources, until the hosting task starts them.
        var sourcesToStart: (@Sendable () async -> Void)?
        /// Whether the sources' task runs.
        var sourcesRunning = false
        var stop: Duration?
        var deadline = false
        var quiescent = false
        var cancelled = false
        var closed = false
        var members = 0
        var stopRequested = false
        var phase = Phase.dormant
        var waiter: CheckedContinuation<Command?, Never>?
        var timers: [Task<Void, Never>] = []
        var ended = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        var shutdown: Shutdown?

        /// The next command. A cancellation or the deadline comes before anything else, so a stream of new
        /// effects cannot postpone them (the jobs left are abandoned when the host closes).
        mutating func take() -> Command? {
            if cancelled { return .cancelled }
            if deadline {
                deadline = false
                return .deadline
            }
            if let sources = sourcesToStart {
                sourcesToStart = nil
                sourcesRunning = true
                return .startSources(sources)
            }
            if runnersToAdd > 0 {
                defer { runnersToAdd = 0 }
                return .addRunners(runnersToAdd)
            }
            // Before quiescence, even when both are there: a source that ignores cancellation can still
            // hold the group after the last member left, and only the deadline ends `run()`'s wait then.
            if let gracePeriod = stop {
                stop = nil
                return .stop(gracePeriod: gracePeriod)
            }
            if quiescent {
                quiescent = false
                return .quiescent
            }
            return nil
        }

        /// Whether nothing runs or waits: the hosting task may end (unless it stays until the end).
        var isIdle: Bool {
            !keepsTask && runners == 0 && !sourcesRunning && sourcesToStart == nil && !cancelled && !deadline
                && runnersToAdd == 0
                && stop == nil
                && !quiescent
        }

        /// Asks for runners while jobs wait: at least one on its way, and as many as are already at work
        /// (up to one per waiting job), so a backlog of long effects doubles its runners at each turn
        /// instead of adding them one by one.
        mutating func callRunnersIfNeeded() {
            let working = runners - runnersComing
            let wanted = min(queue.count, max(1, working))
            guard wanted > runnersComing else { return }
            let more = wanted - runnersComing
            runnersComing += more
            runners += more
            runnersToAdd += more
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

    /// What a change to the mailbox asks of the caller, once the lock is released.
    private enum Wake {
        case none
        case resume(CheckedContinuation<Command?, Never>, Command?)
        case launch
    }

    private let mailbox = Locked(Mailbox())
    private let clock: any Clock<Duration>

    /// A host whose shutdown takes the turns of `shutdown`, timed on `clock`, with `members` loops on it
    /// from the start.
    init(
        clock: any Clock<Duration>,
        shutdown: Shutdown = Shutdown(stopping: {}, deadline: {}, cancelled: {}),
        members: Int = 0
    ) {
        self.clock = clock
        mailbox.withLock { mailbox in
            mailbox.shutdown = shutdown
            mailbox.members = members
        }
    }

    /// Runs `job` as soon as a runner gets to it; abandons it at once if the host has closed.
    @usableFromInline
    func spawn(_ job: Job) {
        var abandoned = false
        post { mailbox in
            if mailbox.closed {
                abandoned = true
            } else {
                mailbox.queue.append(job)
                mailbox.callRunnersIfNeeded()
            }
        }
        if abandoned { job.abandon() }
    }

    /// Stops taking jobs, abandoning those not yet run; later ones are abandoned when spawned.
    private func close() {
        let leftovers = mailbox.withLock { mailbox in
            mailbox.closed = true
            return mailbox.queue.removeAll()
        }
        for job in leftovers { job.abandon() }
    }

    /// Asks for a graceful stop within `gracePeriod`; the shortest asked for wins.
    @usableFromInline
    func requestStop(gracePeriod: Duration) {
        var closing = false
        post { mailbox in
            mailbox.stop = mailbox.stop.map { min($0, gracePeriod) } ?? gracePeriod
            mailbox.stopRequested = true
            if mailbox.members <= 0 { mailbox.quiescent = true }
            if case .closing = mailbox.phase { closing = true }
        }
        // The hosting task no longer takes commands (every member stopped; it waits for a source that
        // ignores cancellation): the deadline must still come.
        if closing { startDeadline(after: gracePeriod) }
    }

    /// The task running `run()` was cancelled. Once the hosting task no longer takes commands (every
    /// member stopped, the group waiting for a source), `run()`'s wait ends at once.
    @usableFromInline
    func cancel() {
        var endNow = false
        post { mailbox in
            mailbox.cancelled = true
            if case .closing = mailbox.phase { endNow = true }
        }
        if endNow { end() }
    }

    /// A loop runs on this host from now on.
    @usableFromInline
    func join() {
        mailbox.withLock { $0.members += 1 }
    }

    /// A loop has stopped; once every member has left after a stop was requested, the host is done.
    @usableFromInline
    func leave() {
        post { mailbox in
            mailbox.members -= 1
            if mailbox.stopRequested && mailbox.members <= 0 { mailbox.quiescent = true }
        }
    }

    /// Changes the mailbox, then hands the hosting task its next command, starting the task if none runs.
    private func post(_ change: (inout Mailbox) -> Void) {
        let wake = mailbox.withLock { mailbox -> Wake in
            change(&mailbox)
            return Self.wake(&mailbox)
        }
        perform(wake)
    }

    /// What a changed mailbox asks for. Called with the lock held.
    private static func wake(_ mailbox: inout Mailbox) -> Wake {
        switch mailbox.phase {
        case .dormant:
            guard !mailbox.isIdle else { return .none }
            mailbox.phase = .coordinating
            return .launch
        case .coordinating:
            guard let waiter = mailbox.waiter else { return .none }
            if let command = mailbox.take() {
                mailbox.waiter = nil
                return .resume(waiter, command)
            }
            // The last runner has ended: the hosting task ends too.
            guard mailbox.isIdle else { return .none }
            mailbox.waiter = nil
            mailbox.phase = .dormant
            return .resume(waiter, nil)
        case .closing:
            return .none
        }
    }

    private func perform(_ wake: Wake) {
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
        let (waiters, timers) = mailbox.withLock {
            mailbox -> ([CheckedContinuation<Void, Never>], [Task<Void, Never>]) in
            guard !mailbox.ended else { return ([], []) }
            mailbox.ended = true
            // What it references (the loops) is released once the shutdown is over.
            mailbox.shutdown = nil
            defer {
                mailbox.endWaiters = []
                mailbox.timers = []
            }
            return (mailbox.endWaiters, mailbox.timers)
        }
        for timer in timers { timer.cancel() }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once ``end()`` has been called. Not cancellable: `run()` cancels through ``cancel()``, and
    /// returns only once that has been carried out (members stopped, effects cancelled).
    func ended() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = mailbox.withLock { mailbox in
                if !mailbox.ended { mailbox.endWaiters.append(continuation) }
                return mailbox.ended
            }
            if ended { continuation.resume() }
        }
    }

    /// Whether a hosting task runs (or is about to).
    var hasTask: Bool {
        mailbox.withLock { mailbox in
            if case .dormant = mailbox.phase { false } else { true }
        }
    }

    /// Starts the hosting task now, from the caller's task, and keeps it until the end: for `run()`, so
    /// effects run in tasks that inherit its task-local values and priority, as child tasks would.
    func launchKeepingTask() {
        let launch = mailbox.withLock { mailbox -> Bool in
            mailbox.keepsTask = true
            guard case .dormant = mailbox.phase else { return false }
            mailbox.phase = .coordinating
            return true
        }
        if launch { Task { await self.host() } }
    }

    /// Runs `sources` until the shutdown begins; not if it has begun already.
    func startSources(_ sources: @escaping @Sendable () async -> Void) {
        post { mailbox in
            guard !mailbox.stopRequested, !mailbox.closed else { return }
            mailbox.sourcesToStart = sources
        }
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
                    self.post { $0.sourcesRunning = false }
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
        mailbox.withLock { $0.shutdown }
    }

    /// Closes the host after the last command: jobs not started are abandoned, running ones cancelled. A
    /// deadline or cancellation that comes later ends `run()`'s wait at once.
    private func finish(_ group: inout DiscardingTaskGroup) {
        mailbox.withLock { $0.phase = .closing }
        close()
        group.cancelAll()
        // A deadline or cancellation posted after the last command was taken is not lost.
        let pending = mailbox.withLock { $0.deadline || $0.cancelled }
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
        var job: Job?
        post { mailbox in
            if first { mailbox.runnersComing -= 1 }
            job = mailbox.closed ? nil : mailbox.queue.removeFirst()
            if job == nil {
                mailbox.runners -= 1
            } else {
                mailbox.callRunnersIfNeeded()
            }
        }
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
            // Decided in the same hold of the lock as the post, so the hosting task cannot stop taking
            // commands in between and leave the deadline unheard.
            var endNow = false
            self.post { mailbox in
                if case .closing = mailbox.phase { endNow = true } else { mailbox.deadline = true }
            }
            if endNow { self.end() }
        }
        let keep = mailbox.withLock { mailbox -> Bool in
            guard !mailbox.ended else { return false }
            mailbox.timers.append(timer)
            return true
        }
        if !keep { timer.cancel() }
    }

    /// The next command, waiting for one if there is none; `nil` when nothing is left to coordinate (the
    /// hosting task then ends, and the next command starts a new one).
    private func next() async -> Command? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Command?, Never>) in
            let ready = mailbox.withLock { mailbox -> Command?? in
                if let command = mailbox.take() { return command }
                if mailbox.isIdle {
                    mailbox.phase = .dormant
                    return .some(nil)
                }
                mailbox.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
