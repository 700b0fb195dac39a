/// The one task that runs a loop's (or a group of loops') asynchronous work.
///
/// Effect handlers must run in child tasks of the task group that `run()` owns, but effects are
/// started by whichever thread processed the event. The host is the hand-over: threads post jobs
/// here, and the task running `run()` adds them to its group. Posting never waits; the running task
/// is woken at most once per batch of jobs.
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

    /// What the running task is told to do next.
    enum Command {
        case spawn([Job])
        case stop(gracePeriod: Duration)
        case deadline
        case quiescent
        case cancelled
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

        mutating func take() -> Command? {
            if !jobs.isEmpty {
                defer { jobs = [] }
                return .spawn(jobs)
            }
            if cancelled { return .cancelled }
            if let gracePeriod = stop {
                stop = nil
                return .stop(gracePeriod: gracePeriod)
            }
            if deadline {
                deadline = false
                return .deadline
            }
            if quiescent {
                quiescent = false
                return .quiescent
            }
            return nil
        }
    }

    private let mailbox = Locked(Mailbox())

    /// Runs `job` in the group as soon as the running task gets to it; abandons it at once if the host
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
    @usableFromInline
    func close() {
        let leftovers = mailbox.withLock { mailbox in
            mailbox.closed = true
            defer { mailbox.jobs = [] }
            return mailbox.jobs
        }
        for job in leftovers { job.abandon() }
    }

    /// Asks for a graceful stop within `gracePeriod`.
    @usableFromInline
    func requestStop(gracePeriod: Duration) {
        post { mailbox in
            mailbox.stop = mailbox.stop.map { min($0, gracePeriod) } ?? gracePeriod
            mailbox.stopRequested = true
            if mailbox.members <= 0 { mailbox.quiescent = true }
        }
    }

    /// The grace period is over.
    @usableFromInline
    func signalDeadline() {
        post { $0.deadline = true }
    }

    /// A loop starts running on this host.
    @usableFromInline
    func join() {
        mailbox.withLock { $0.members += 1 }
    }

    /// A loop has nothing left to do while stopping; once every member has left after a stop was
    /// requested, the host is done.
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

    /// What the running task does at each turn of a shutdown.
    struct Shutdown {
        /// Graceful shutdown began (sources are to stop).
        var stopping: () -> Void
        /// The grace period is over: cancel everything in flight.
        var deadline: () -> Void
        /// The task was cancelled: stop at once.
        var cancelled: () -> Void
    }

    /// The running task's work: starts jobs in `group` until shutdown is complete; returns how it ended.
    func coordinate(
        group: inout DiscardingTaskGroup,
        clock: any Clock<Duration>,
        shutdown: Shutdown
    ) async -> LoopReport.Ending {
        var ending = LoopReport.Ending.drained
        var deadline: Task<Void, Never>?
        defer {
            deadline?.cancel()
            close()
        }
        while true {
            switch await next() {
            case .spawn(let jobs):
                for job in jobs { group.addTask(operation: job.run) }
            case .stop(let gracePeriod):
                shutdown.stopping()
                if deadline == nil {
                    deadline = Task {
                        do { try await clock.sleep(for: gracePeriod) } catch { return }
                        self.signalDeadline()
                    }
                }
            case .deadline:
                ending = .deadlineExceeded
                shutdown.deadline()
                group.cancelAll()
            case .quiescent:
                return ending
            case .cancelled:
                shutdown.cancelled()
                group.cancelAll()
                return .cancelled
            }
        }
    }

    /// The next command, waiting for one if there is none; `.cancelled` once the task is cancelled.
    func next() async -> Command {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Command, Never>) in
                let ready = mailbox.withLock { mailbox -> Command? in
                    if Task.isCancelled { mailbox.cancelled = true }
                    if let command = mailbox.take() { return command }
                    mailbox.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            post { $0.cancelled = true }
        }
    }
}
