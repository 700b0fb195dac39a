internal import Synchronization

/// The one task that runs a loop's (or a group of loops') asynchronous work.
///
/// Effect handlers must run in child tasks of the task group that `run()` owns, but effects are
/// started by whichever thread processed the event. The host is the hand-over: threads post jobs
/// here, and the task running `run()` adds them to its group. Posting never waits; the running task
/// is woken at most once per batch of jobs.
final class Host: Sendable {
    /// Work for the group, and what to do instead if the host has closed and can no longer run it.
    struct Job: Sendable {
        var run: @Sendable () async -> Void
        var abandon: @Sendable () -> Void
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

    private let mailbox = Mutex(Mailbox())

    /// Runs `job` in the group as soon as the running task gets to it; abandons it at once if the host
    /// has closed.
    func spawn(_ job: Job) {
        let closed = mailbox.withLock { $0.closed }
        guard !closed else { return job.abandon() }
        var abandoned = false
        post { mailbox in
            if mailbox.closed { abandoned = true } else { mailbox.jobs.append(job) }
        }
        if abandoned { job.abandon() }
    }

    /// Stops taking jobs, abandoning those not yet run; later ones are abandoned when spawned.
    func close() {
        let leftovers = mailbox.withLock { mailbox in
            mailbox.closed = true
            defer { mailbox.jobs = [] }
            return mailbox.jobs
        }
        for job in leftovers { job.abandon() }
    }

    /// Asks for a graceful stop within `gracePeriod`.
    func requestStop(gracePeriod: Duration) {
        post { $0.stop = $0.stop.map { min($0, gracePeriod) } ?? gracePeriod }
    }

    /// The grace period is over.
    func signalDeadline() {
        post { $0.deadline = true }
    }

    /// Shutdown has nothing left to wait for.
    func signalQuiescent() {
        post { $0.quiescent = true }
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
