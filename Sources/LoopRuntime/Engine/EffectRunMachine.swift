/// The state machine of one controlled effect's run (see `EffectRun`): the task its handler runs in,
/// whether it was asked to cancel, whether its handler returned, and its outcome, which the handler's
/// return, its cancellation before it began, or its timeout decides, whichever comes first. A value,
/// kept behind the run's lock; every input returns what the run does once the lock is released, so
/// each transition is tested as a value (`EffectRunMachineTests`).
///
/// `Handle` is the handler's task, `Waiter` the task waiting for the outcome; tests use plain values.
@usableFromInline
struct EffectRunMachine<Handle, Waiter> {
    /// The handler's task, once attached.
    private(set) var handle: Handle?
    /// Whether the run was asked to cancel: a task attached later is cancelled at once.
    private(set) var cancelled = false
    /// Whether the handler has returned.
    private(set) var returned = false
    /// The outcome, once decided: the first to decide it wins.
    private(set) var outcome: EffectOutcome?
    /// The task waiting for the outcome, until it is decided.
    private var waiter: Waiter?

    @usableFromInline
    init() {}

    /// The run is asked to cancel: the task to cancel, if one is attached (otherwise it is cancelled as
    /// it attaches).
    mutating func cancel() -> Handle? {
        cancelled = true
        return handle
    }

    /// The handler's task is attached: `true` when the run was asked to cancel already (cancel it).
    mutating func attach(_ handle: Handle) -> Bool {
        self.handle = handle
        return cancelled
    }

    /// Something decides the outcome: `decided` when it is the first to, with the waiter to resume with
    /// it, if one waits.
    mutating func resolve(_ outcome: EffectOutcome) -> (decided: Bool, resume: Waiter?) {
        guard self.outcome == nil else { return (false, nil) }
        self.outcome = outcome
        defer { waiter = nil }
        return (true, waiter)
    }

    /// The handler returned with `outcome`: decides it unless something did first (it timed out, and
    /// the handler ran on unaccounted until now).
    mutating func handlerReturned(_ outcome: EffectOutcome) -> (decided: Bool, resume: Waiter?) {
        returned = true
        return resolve(outcome)
    }

    /// A task waits for the outcome: the outcome at once if it is decided; otherwise `waiter` is kept
    /// until it is.
    mutating func awaitOutcome(_ waiter: Waiter) -> EffectOutcome? {
        if let outcome { return outcome }
        self.waiter = waiter
        return nil
    }
}
