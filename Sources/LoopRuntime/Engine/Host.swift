/// The task that runs a loop's (or a group of loops') asynchronous work, and the signal that ends
/// `run()`.
///
/// Effect handlers run in child tasks of one task group, but effects are started by whichever thread
/// processed the event. The host is the hand-over: threads post jobs here, and the hosting task adds them
/// to its group. Posting never waits; the hosting task is woken at most once per batch of jobs.
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
        case spawn([Job])
        case stop(gracePeriod: Duration)
        case deadline
        case quiescent
        case cancelled
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

    private struct Mailbox {
        var jobs: [Job] = []
        var stop: Duration?
        var deadline = false
        var quiescent = false
        var cancelled = false
        var closed = false
        var members = 0
        var stopRequested = false
        var waiter: CheckedContinuation<Command, Never>?
        var coordinating = true
        var timers: [Task<Void, Never>] = []
        var ended = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        var sources: (@Sendable () async -> Void)?
        var shutdown: Shutdown?

        /// The next command. A cancellation or the deadline comes before jobs, so a stream of new effects
        /// cannot postpone them (the jobs left are abandoned when the host closes).
        mutating func take() -> Command? {
            if cancelled { return .cancelled }
            if deadline {
                deadline = false
                return .deadline
            }
            if !jobs.isEmpty {
                defer { jobs = [] }
                return .spawn(jobs)
            }
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
    }

    private let mailbox = Locked(Mailbox())
    private let clock: any Clock<Duration>

    init(clock: any Clock<Duration>) {
        self.clock = clock
    }

    /// Runs `job` in the group as soon as the hosting task gets to it; abandons it at once if the host
    /// has closed.
    @usableFromInline
    func spawn(_ job: Job) {
        var abandoned = false
        post { mailbox in
            if mailbox.closed { abandoned = true } else { mailbox.jobs.append(job) }
        }
        if abandoned { job.abandon() }
    }

    /// Stops taking jobs, abandoning those not yet run; later ones are abandoned when spawned.
    private func close() {
        let leftovers = mailbox.withLock { mailbox in
            mailbox.closed = true
            defer { mailbox.jobs = [] }
            return mailbox.jobs
        }
        for job in leftovers { job.abandon() }
    }

    /// Asks for a graceful stop within `gracePeriod`; the shortest asked for wins.
    @usableFromInline
    func requestStop(gracePeriod: Duration) {
        var coordinating = true
        post { mailbox in
            mailbox.stop = mailbox.stop.map { min($0, gracePeriod) } ?? gracePeriod
            mailbox.stopRequested = true
            if mailbox.members <= 0 { mailbox.quiescent = true }
            coordinating = mailbox.coordinating
        }
        // The hosting task no longer takes commands (every member stopped; it waits for a source that
        // ignores cancellation): the deadline must still come.
        if !coordinating { startDeadline(after: gracePeriod) }
    }

    /// The task running `run()` was cancelled. Once the hosting task no longer coordinates (every
    /// member stopped, the group waiting for a source), `run()`'s wait ends at once.
    @usableFromInline
    func cancel() {
        var endNow = false
        post { mailbox in
            mailbox.cancelled = true
            endNow = !mailbox.coordinating
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

    private func post(_ change: (inout Mailbox) -> Void) {
        let wake = mailbox.withLock { mailbox -> (CheckedContinuation<Command, Never>, Command)? in
            change(&mailbox)
            guard let waiter = mailbox.waiter, let command = mailbox.take() else { return nil }
            mailbox.waiter = nil
            return (waiter, command)
        }
        if let (waiter, command) = wake { waiter.resume(returning: command) }
    }

    /// Ends `run()`'s wait; the first call counts.
    func end() {
        let (waiters, timers) = mailbox.withLock {
            mailbox -> ([CheckedContinuation<Void, Never>], [Task<Void, Never>]) in
            guard !mailbox.ended else { return ([], []) }
            mailbox.ended = true
            defer {
                mailbox.endWaiters = []
                mailbox.timers = []
            }
            return (mailbox.endWaiters, mailbox.timers)
        }
        for timer in timers { timer.cancel() }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once ``end()`` has been called.
    func ended() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = mailbox.withLock { mailbox in
                if !mailbox.ended { mailbox.endWaiters.append(continuation) }
                return mailbox.ended
            }
            if done { continuation.resume() }
        }
    }

    /// Starts the hosting task: `sources` (if any) and every job posted, until shutdown is complete; then
    /// ends `run()`'s wait (earlier at the deadline or a cancellation). The task is not awaited by
    /// anyone: it finishes on its own once every job it runs has.
    func launch(sources: (@Sendable () async -> Void)?, shutdown: Shutdown) {
        // Handed over through the mailbox, not captured by the task: what they reference (the loops) is
        // released as soon as the group is done, before `run()` returns.
        mailbox.withLock { mailbox in
            mailbox.sources = sources
            mailbox.shutdown = shutdown
        }
        Task { await self.host() }
    }

    private func host() async {
        await withDiscardingTaskGroup { group in
            let (sources, shutdown) = mailbox.withLock { mailbox in
                defer {
                    mailbox.sources = nil
                    mailbox.shutdown = nil
                }
                return (mailbox.sources, mailbox.shutdown)
            }
            if let sources { group.addTask(operation: sources) }
            if let shutdown { await coordinate(group: &group, shutdown: shutdown) }
        }
        end()
    }

    private func coordinate(group: inout DiscardingTaskGroup, shutdown: Shutdown) async {
        defer {
            // A deadline or cancellation posted after the last command was taken is not lost.
            let pending = mailbox.withLock { mailbox in
                mailbox.coordinating = false
                return mailbox.deadline || mailbox.cancelled
            }
            if pending { end() }
        }
        while true {
            switch await next() {
            case .spawn(let jobs):
                for job in jobs { group.addTask(operation: job.run) }
            case .stop(let gracePeriod):
                shutdown.stopping()
                startDeadline(after: gracePeriod)
            case .deadline:
                shutdown.deadline()
                close()
                group.cancelAll()
                end()
                return
            case .quiescent:
                close()
                group.cancelAll()
                return
            case .cancelled:
                shutdown.cancelled()
                close()
                group.cancelAll()
                end()
                return
            }
        }
    }

    /// Starts a grace period's timer: one for each stop asked for, so a later stop with a shorter grace
    /// period brings the deadline forward; the first to fire counts. When one fires after the hosting
    /// task stopped coordinating (every member stopped, and the group is waiting for a source that
    /// ignores cancellation), it ends `run()`'s wait itself.
    private func startDeadline(after gracePeriod: Duration) {
        let clock = self.clock
        let timer = Task {
            do { try await clock.sleep(for: gracePeriod) } catch { return }
            // Decided in the same hold of the lock as the post, so the coordinator cannot stop
            // coordinating in between and leave the deadline unheard.
            var endNow = false
            self.post { mailbox in
                if mailbox.coordinating { mailbox.deadline = true } else { endNow = true }
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

    /// The next command, waiting for one if there is none.
    private func next() async -> Command {
        await withCheckedContinuation { (continuation: CheckedContinuation<Command, Never>) in
            let ready = mailbox.withLock { mailbox -> Command? in
                if let command = mailbox.take() { return command }
                mailbox.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
