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

    /// How far a stop has come: what it has posted for the hosting task and the task has not taken yet.
    enum Stopping {
        /// No stop asked, and `run()` not cancelled.
        case notAsked
        /// A graceful stop was asked for. `grace`: the shortest grace period asked, until the hosting task
        /// takes it as the `stop` command; `deadline`: a grace period's timer fired, until taken;
        /// `quiescent`: every member has left, until taken.
        case asked(grace: Duration?, deadline: Bool, quiescent: Bool)
        /// The task running `run()` was cancelled: that is the hosting task's next command, before any
        /// other, and the last.
        case cancelled
    }

    /// The sources of the host's loops.
    enum Sources {
        /// None to start, none running.
        case none
        /// To be started by the hosting task.
        case toStart(@Sendable () async -> Void)
        /// Running in the hosting task's group.
        case running
    }

    /// Whether `run()`'s wait has ended, and what ends with it.
    enum Ending {
        /// Not yet: the tasks waiting for the end, the grace periods' timers to cancel then, and the
        /// shutdown's turns (released at the end, with the loops they reference).
        case waiting([EndWaiter], timers: [Task<Void, Never>], shutdown: Host.Shutdown?)
        /// It has ended.
        case ended
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
    private(set) var sources = Sources.none
    private(set) var stopping = Stopping.notAsked
    /// Loops on the host.
    private(set) var members = 0
    private(set) var ending: Ending

    /// A host whose shutdown takes the turns of `shutdown`, with `members` loops on it from the start.
    init(shutdown: Host.Shutdown? = nil, members: Int = 0) {
        ending = .waiting([], timers: [], shutdown: shutdown)
        self.members = members
    }

    /// Whether a hosting task runs (or is about to).
    var hasTask: Bool {
        if case .dormant = phase { false } else { true }
    }

    /// Whether jobs are no longer taken (the hosting task has taken its last command): those posted are
    /// cancelled.
    var isClosed: Bool {
        if case .closing = phase { true } else { false }
    }

    /// The shutdown's turns, until `run()`'s wait ends.
    var shutdown: Host.Shutdown? {
        if case .waiting(_, _, let shutdown) = ending { shutdown } else { nil }
    }

    // MARK: Inputs

    /// A job is posted: queued, with runners called for it; handed back to be cancelled if the host has
    /// closed.
    mutating func spawn(_ job: Job) -> (Wake, cancel: Job?) {
        if isClosed { return (wake(), job) }
        queue.append(job)
        callRunnersIfNeeded()
        return (wake(), nil)
    }

    /// A runner asks for its next job (`first`: its first); `nil` when there is none, and the runner
    /// ends. A runner that takes a job and leaves others waiting calls for more.
    mutating func nextJob(first: Bool) -> (Job?, Wake) {
        if first { runnersComing -= 1 }
        let job = isClosed ? nil : queue.popFirst()
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
        switch stopping {
        case .notAsked:
            stopping = .asked(grace: gracePeriod, deadline: false, quiescent: members <= 0)
        case .asked(let grace, let deadline, let quiescent):
            stopping = .asked(
                grace: grace.map { min($0, gracePeriod) } ?? gracePeriod,
                deadline: deadline,
                quiescent: quiescent || members <= 0
            )
        case .cancelled:
            break
        }
        return (wake(), isClosed)
    }

    /// The task running `run()` was cancelled. `endNow` once the hosting task no longer takes
    /// commands: `run()`'s wait ends at once.
    mutating func cancel() -> (Wake, endNow: Bool) {
        stopping = .cancelled
        return (wake(), isClosed)
    }

    /// A grace period's timer fired. `endNow` once the hosting task no longer takes commands;
    /// otherwise the deadline is its next command.
    mutating func deadlineFired() -> (Wake, endNow: Bool) {
        if isClosed { return (wake(), true) }
        switch stopping {
        case .notAsked: stopping = .asked(grace: nil, deadline: true, quiescent: false)
        case .asked(let grace, _, let quiescent): stopping = .asked(grace: grace, deadline: true, quiescent: quiescent)
        // Cancellation comes first, and ends `run()`'s wait.
        case .cancelled: break
        }
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
        if case .asked(let grace, let deadline, false) = stopping, members <= 0 {
            stopping = .asked(grace: grace, deadline: deadline, quiescent: true)
        }
        return wake()
    }

    /// The sources are to run until the shutdown begins; not if it has begun already.
    mutating func startSources(_ sources: @escaping @Sendable () async -> Void) -> Wake {
        if case .notAsked = stopping, !isClosed { self.sources = .toStart(sources) }
        return wake()
    }

    /// The sources' task has ended.
    mutating func sourcesEnded() -> Wake {
        sources = .none
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

    /// The hosting task took its last command: it closes the host (returning the jobs not started,
    /// to cancel) and takes no more commands. `endNow` when a deadline or cancellation was posted and
    /// not taken: `run()`'s wait ends at once.
    mutating func finish() -> (cancel: [Job], endNow: Bool) {
        phase = .closing
        let cutShort =
            switch stopping {
            case .notAsked: false
            case .asked(_, let deadline, _): deadline
            case .cancelled: true
            }
        return (queue.removeAll(), cutShort)
    }

    /// Keeps a grace period's timer, to cancel at the end; `false` when `run()`'s wait has ended (the
    /// caller cancels it).
    mutating func keep(_ timer: Task<Void, Never>) -> Bool {
        guard case .waiting(let waiters, var timers, let shutdown) = ending else { return false }
        timers.append(timer)
        ending = .waiting(waiters, timers: timers, shutdown: shutdown)
        return true
    }

    /// Ends `run()`'s wait: the tasks waiting for it, and the timers to cancel; nothing after the first
    /// call. What the shutdown references (the loops) is released.
    mutating func end() -> (waiters: [EndWaiter], timers: [Task<Void, Never>]) {
        guard case .waiting(let waiters, let timers, _) = ending else { return ([], []) }
        ending = .ended
        return (waiters, timers)
    }

    /// A task waits for `run()`'s end: `true` when it has ended already (resume it); otherwise it is
    /// kept until ``end()``.
    mutating func awaitEnd(_ waiter: EndWaiter) -> Bool {
        guard case .waiting(var waiters, let timers, let shutdown) = ending else { return true }
        waiters.append(waiter)
        ending = .waiting(waiters, timers: timers, shutdown: shutdown)
        return false
    }

    // MARK: Rules

    /// The next command. A cancellation or the deadline comes before anything else, so a stream of new
    /// effects cannot postpone them (the jobs left are cancelled when the host closes).
    private mutating func take() -> HostCommand? {
        if case .cancelled = stopping { return .cancelled }
        if case .asked(let grace, true, let quiescent) = stopping {
            stopping = .asked(grace: grace, deadline: false, quiescent: quiescent)
            return .deadline
        }
        if case .toStart(let start) = sources {
            sources = .running
            return .startSources(start)
        }
        if runnersToAdd > 0 {
            defer { runnersToAdd = 0 }
            return .addRunners(runnersToAdd)
        }
        // Before quiescence, even when both are there: a source that ignores cancellation can still
        // hold the group after the last member left, and only the deadline ends `run()`'s wait then.
        if case .asked(let grace?, let deadline, let quiescent) = stopping {
            stopping = .asked(grace: nil, deadline: deadline, quiescent: quiescent)
            return .stop(gracePeriod: grace)
        }
        if case .asked(let grace, let deadline, true) = stopping {
            stopping = .asked(grace: grace, deadline: deadline, quiescent: false)
            return .quiescent
        }
        return nil
    }

    /// Whether nothing runs or waits to be coordinated: the hosting task may end (unless it stays until
    /// the end).
    var hasNothingToCoordinate: Bool {
        guard !keepsTask, runners == 0, runnersToAdd == 0, case .none = sources else { return false }
        return switch stopping {
        case .notAsked, .asked(grace: nil, deadline: false, quiescent: false): true
        case .asked, .cancelled: false
        }
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
