/// What a host's hosting task is told to do next (see ``Host``).
enum HostCommand {
    /// Start the sources' task.
    case startSources(@Sendable () async -> Void)
    /// Add this many runners to the group.
    case addRunners(Int)
    /// A graceful stop began: tell the members, and start the grace period's timer.
    case stop(gracePeriod: Duration)
    /// The grace period is over: stop every member at once, and end `run()`'s wait.
    case deadline
    /// Every member left after a stop was asked for: the shutdown is complete.
    case quiescent
    /// The task running `run()` was cancelled: stop every member at once, and end `run()`'s wait.
    case cancelled
}

/// The state machine of a ``Host``: its queue of jobs, its runners, its hosting task's phase, and
/// the shutdown's progress. A value, kept behind the host's lock; every input is a method that returns
/// what the host does once the lock is released (``Wake``, jobs to cancel, waiters to resume), so each
/// transition is tested as a value (`HostMachineTests`).
///
/// `Job`, `Waiter` (the hosting task waiting for a command) and `EndWaiter` (a task waiting for
/// `run()`'s end) are the host's job and continuation types; tests use plain values.
struct HostMachine<Job, Waiter, EndWaiter> {
    /// Whether a hosting task runs, and what it does.
    enum Phase {
        /// No hosting task: nothing to coordinate. The next command starts one.
        case dormant
        /// The hosting task takes commands; `waiter` when it is waiting for one.
        case coordinating(waiter: Waiter?)
        /// The hosting task has taken its last command (the shutdown is complete, or cut short) and
        /// only waits for its group's tasks to finish.
        case closing
    }

    /// What a change asks of the host, once the lock is released.
    enum Wake {
        /// Nothing.
        case none
        /// Hand the waiting hosting task its next command (`nil`: nothing is left to coordinate,
        /// and it ends).
        case resume(Waiter, HostCommand?)
        /// Start a hosting task.
        case launch
    }

    private(set) var phase = Phase.dormant
    /// Jobs in the order they were posted.
    private(set) var queue = Queue<Job>()
    /// Runners alive, including those asked for and not yet added to the group.
    private(set) var runners = 0
    /// Runners asked for that the hosting task has not added yet.
    private(set) var runnersToAdd = 0
    /// Runners on their way: asked for, and not yet at their first job.
    private(set) var runnersComing = 0
    /// Whether the hosting task stays until the end instead of ending when nothing runs: the host of
    /// `run()`, whose task the effects' runners inherit task-local values and priority from.
    private(set) var keepsTask = false
    /// The sources, until the hosting task starts them.
    private var sourcesToStart: (@Sendable () async -> Void)?
    /// Whether the sources' task runs.
    private(set) var sourcesRunning = false
    /// The grace period of the stop asked for and not yet taken as a command (the shortest asked for).
    private(set) var stop: Duration?
    private(set) var deadline = false
    private(set) var quiescent = false
    private(set) var cancelled = false
    /// Whether jobs are no longer taken: those posted are cancelled.
    private(set) var closed = false
    /// Loops on the host.
    private(set) var members = 0
    private(set) var stopAsked = false
    /// The grace periods' timers.
    private(set) var timers: [Task<Void, Never>] = []
    /// Whether `run()`'s wait has ended.
    private(set) var ended = false
    private var endWaiters: [EndWaiter] = []
    /// The shutdown's turns, until the shutdown is over.
    private(set) var shutdown: Host.Shutdown?

    /// A host whose shutdown takes the turns of `shutdown`, with `members` loops on it from the start.
    init(shutdown: Host.Shutdown? = nil, members: Int = 0) {
        self.shutdown = shutdown
        self.members = members
    }

    /// Whether a hosting task runs (or is about to).
    var hasTask: Bool {
        if case .dormant = phase { false } else { true }
    }

    // MARK: Inputs

    /// A job is posted: queued, with runners called for it; handed back to be cancelled if the host has
    /// closed.
    mutating func spawn(_ job: Job) -> (Wake, cancel: Job?) {
        if closed { return (wake(), job) }
        queue.append(job)
        callRunnersIfNeeded()
        return (wake(), nil)
    }

    /// A runner asks for its next job (`first`: its first); `nil` when there is none, and the runner
    /// ends. A runner that takes a job and leaves others waiting calls for more.
    mutating func nextJob(first: Bool) -> (Job?, Wake) {
        if first { runnersComing -= 1 }
        let job = closed ? nil : queue.popFirst()
        if job == nil {
            runners -= 1
        } else {
            callRunnersIfNeeded()
        }
        return (job, wake())
    }

    /// A graceful stop is asked for within `gracePeriod` (the shortest asked for wins). `startDeadline`
    /// when the hosting task no longer takes commands (every member stopped; it waits for a source
    /// that ignores cancellation): the host starts the grace period's timer itself.
    mutating func askToStop(gracePeriod: Duration) -> (Wake, startDeadline: Bool) {
        stop = stop.map { min($0, gracePeriod) } ?? gracePeriod
        stopAsked = true
        if members <= 0 { quiescent = true }
        let closing = if case .closing = phase { true } else { false }
        return (wake(), closing)
    }

    /// The task running `run()` was cancelled. `endNow` once the hosting task no longer takes
    /// commands: `run()`'s wait ends at once.
    mutating func cancel() -> (Wake, endNow: Bool) {
        cancelled = true
        let closing = if case .closing = phase { true } else { false }
        return (wake(), closing)
    }

    /// A grace period's timer fired. `endNow` once the hosting task no longer takes commands;
    /// otherwise the deadline is its next command.
    mutating func deadlineFired() -> (Wake, endNow: Bool) {
        if case .closing = phase { return (wake(), true) }
        deadline = true
        return (wake(), false)
    }

    /// A loop runs on the host from now on.
    mutating func join() {
        members += 1
    }

    /// A loop has stopped; once every member has left after a stop was asked for, the shutdown is
    /// complete.
    mutating func leave() -> Wake {
        members -= 1
        if stopAsked && members <= 0 { quiescent = true }
        return wake()
    }

    /// The sources are to run until the shutdown begins; not if it has begun already.
    mutating func startSources(_ sources: @escaping @Sendable () async -> Void) -> Wake {
        if !stopAsked, !closed { sourcesToStart = sources }
        return wake()
    }

    /// The sources' task has ended.
    mutating func sourcesEnded() -> Wake {
        sourcesRunning = false
        return wake()
    }

    /// The hosting task asks for its next command: `.some(command)` at once; `.some(nil)` when
    /// nothing is left to coordinate (the task ends, and the next command starts a new one); `nil` when
    /// `waiter` is parked until a command comes.
    mutating func next(_ waiter: Waiter) -> HostCommand?? {
        if let command = take() { return command }
        if hasNothingToCoordinate {
            phase = .dormant
            return .some(nil)
        }
        phase = .coordinating(waiter: waiter)
        return nil
    }

    /// `run()`'s host starts its hosting task now and keeps it until the end; `true` when the
    /// caller launches it (none ran).
    mutating func launchKeepingTask() -> Bool {
        keepsTask = true
        guard case .dormant = phase else { return false }
        phase = .coordinating(waiter: nil)
        return true
    }

    /// Closes the host: jobs are no longer taken; returns those not started, to cancel.
    private mutating func close() -> [Job] {
        closed = true
        return queue.removeAll()
    }

    /// The hosting task took its last command: it closes the host (returning the jobs not started,
    /// to cancel) and takes no more commands. `endNow` when a deadline or cancellation was posted and
    /// not taken: `run()`'s wait ends at once.
    mutating func finish() -> (cancel: [Job], endNow: Bool) {
        phase = .closing
        return (close(), deadline || cancelled)
    }

    /// Keeps a grace period's timer, to cancel at the end; `false` when `run()`'s wait has ended (the
    /// caller cancels it).
    mutating func keep(_ timer: Task<Void, Never>) -> Bool {
        guard !ended else { return false }
        timers.append(timer)
        return true
    }

    /// Ends `run()`'s wait: the tasks waiting for it, and the timers to cancel; nothing after the first
    /// call. What the shutdown references (the loops) is released.
    mutating func end() -> (waiters: [EndWaiter], timers: [Task<Void, Never>]) {
        guard !ended else { return ([], []) }
        ended = true
        shutdown = nil
        defer {
            endWaiters = []
            timers = []
        }
        return (endWaiters, timers)
    }

    /// A task waits for `run()`'s end: `true` when it has ended already (resume it); otherwise it is
    /// kept until ``end()``.
    mutating func awaitEnd(_ waiter: EndWaiter) -> Bool {
        if ended { return true }
        endWaiters.append(waiter)
        return false
    }

    // MARK: Rules

    /// The next command. A cancellation or the deadline comes before anything else, so a stream of new
    /// effects cannot postpone them (the jobs left are cancelled when the host closes).
    private mutating func take() -> HostCommand? {
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

    /// Whether nothing runs or waits to be coordinated: the hosting task may end (unless it stays until
    /// the end).
    var hasNothingToCoordinate: Bool {
        !keepsTask && runners == 0 && !sourcesRunning && sourcesToStart == nil && !cancelled && !deadline
            && runnersToAdd == 0 && stop == nil && !quiescent
    }

    /// Asks for runners while jobs wait: at least one on its way, and as many as are already at work (up
    /// to one per waiting job), so a backlog of long effects doubles its runners at each turn instead of
    /// adding them one by one.
    private mutating func callRunnersIfNeeded() {
        let working = runners - runnersComing
        let wanted = min(queue.count, max(1, working))
        guard wanted > runnersComing else { return }
        let more = wanted - runnersComing
        runnersComing += more
        runners += more
        runnersToAdd += more
    }

    /// What the change just made asks for.
    private mutating func wake() -> Wake {
        switch phase {
        case .dormant:
            guard !hasNothingToCoordinate else { return .none }
            phase = .coordinating(waiter: nil)
            return .launch
        case .coordinating(let waiter):
            guard let waiter else { return .none }
            if let command = take() {
                phase = .coordinating(waiter: nil)
                return .resume(waiter, command)
            }
            // The last runner has ended: the hosting task ends too.
            guard hasNothingToCoordinate else { return .none }
            phase = .dormant
            return .resume(waiter, nil)
        case .closing:
            return .none
        }
    }
}
