public import EffectHandlers
public import LoopCore

/// A group's state machine: its phase and its loops. Kept behind the group's lock; every input
/// returns what the driver (``LoopGroup``) does once the lock is released. The group's lock is taken
/// before a loop's, never after.
@usableFromInline
struct GroupMembers<ID: Hashable & Sendable, State: Sendable, Event: Sendable, Effect: Sendable> {
    @usableFromInline
    typealias Member = Loop<State, Event, Effect>

    /// Where a group is in its life.
    @usableFromInline
    enum Phase {
        /// Created, not running: loops are created and queue their events.
        case created
        /// Running on `host`: every loop is claimed for it the moment it is created.
        case running(Host)
        /// Graceful shutdown on `host`: no loop is created; existing loops drain.
        case stopping(Host)
        /// Stopped: nothing is created or taken.
        case stopped
    }

    /// What looking up the loop for an id found.
    @usableFromInline
    enum Lookup {
        case found(Member)
        /// There is none: create one (outside the lock) and ``insert(_:for:event:router:)`` it.
        case absent
        /// There is none and there will be none: the group is shutting down. Counted.
        case rejected(Rejection)
    }

    /// What inserting a new loop did.
    @usableFromInline
    enum Insertion {
        /// Inserted, `event` taken; if the group runs, the loop was claimed for its host, and the caller
        /// now begins it with `first`.
        case inserted(Delivery, first: Dispatch<Effect, Event>?)
        /// Another caller inserted one first: send to that one.
        case found(Member)
        /// The group began shutting down meanwhile. Counted.
        case rejected(Rejection)
    }

    @usableFromInline
    var phase = Phase.created
    @usableFromInline
    var loops: [ID: Member] = [:]
    /// Removed loops still finishing their effects.
    @usableFromInline
    var retiring: [ObjectIdentifier: Member] = [:]
    /// What removed loops did, and the events turned away for ids with no loop.
    @usableFromInline
    var finished = LoopReport()
    @usableFromInline
    var startWaiters: [(id: UInt64, waiter: CheckedContinuation<Bool, Never>)] = []

    @inlinable
    init() {}

    @inlinable
    var isRunning: Bool {
        switch phase {
        case .running, .stopping: true
        case .created, .stopped: false
        }
    }

    /// Every loop, removed ones still finishing included.
    @inlinable
    var all: [Member] { Array(loops.values) + Array(retiring.values) }

    /// The loop for `id`, if there is one.
    @inlinable
    func loop(for id: ID) -> Member? { loops[id] }

    /// How many loops the group holds (removed ones still finishing not included).
    @inlinable
    var count: Int { loops.count }

    /// The ids of the loops the group holds.
    @inlinable
    var ids: [ID] { Array(loops.keys) }

    /// What removed loops did (and the events turned away), and every loop, for the group's report.
    @inlinable
    var reporting: (finished: LoopReport, loops: [Member]) { (finished, all) }

    /// Takes the loop for `id` out if `stop` stops it (checked under the group's lock, so no sender finds
    /// it in between): the loop, and what `stop` returned, to carry out once the lock is released.
    @inlinable
    mutating func removeIf<Stop>(_ id: ID, _ stop: (Member) -> Stop?) -> (Member, Stop)? {
        guard let loop = loops[id], let stopped = stop(loop) else { return nil }
        _ = remove(id)
        return (loop, stopped)
    }

    @inlinable
    mutating func lookup(_ id: ID) -> Lookup {
        if let loop = loops[id] { return .found(loop) }
        switch phase {
        case .created, .running: return .absent
        case .stopping: return .rejected(reject(.stopping))
        case .stopped: return .rejected(reject(.stopped))
        }
    }

    /// Counts an event turned away for an id with no loop.
    @inlinable
    mutating func reject(_ rejection: Rejection) -> Rejection {
        finished.eventsSent += 1
        finished.eventsRejected += 1
        return rejection
    }

    /// Inserts `loop` for `id` and hands it `event`, unless one was inserted meanwhile or the group began
    /// shutting down. In a running group the loop is claimed for the host here, under the group's lock,
    /// so a stop that follows finds it running and drains it.
    @inlinable
    mutating func insert(
        _ loop: Member,
        for id: ID,
        event: Event,
        context carried: CarriedContext? = nil
    ) -> Insertion {
        if let existing = loops[id] { return .found(existing) }
        var first: Dispatch<Effect, Event>?
        switch phase {
        case .created:
            break
        case .running(let host):
            guard let claimed = try? loop.claim(for: host) else { return .rejected(reject(.stopped)) }
            first = claimed
        case .stopping:
            return .rejected(reject(.stopping))
        case .stopped:
            return .rejected(reject(.stopped))
        }
        loops[id] = loop
        // A claimed loop's baton is its creator's, and an unclaimed loop only queues, so this never processes
        // the event under the group's lock.
        let reception = loop.engine.withLock { $0.receive(event, from: .outside, context: carried) }
        let delivery: Delivery =
            if case .rejected(let rejection) = reception { .rejected(rejection) } else { .accepted }
        return .inserted(delivery, first: first)
    }

    /// Registers a task waiting for the group to start: `true` if it runs or ran, `false` if it stopped
    /// without running, `nil` when the waiter was parked until ``start(_:)`` or ``stop()``.
    @inlinable
    mutating func waitForStart(_ id: UInt64, _ waiter: CheckedContinuation<Bool, Never>) -> Bool? {
        switch phase {
        case .created:
            startWaiters.append((id, waiter))
            return nil
        case .running, .stopping: return true
        case .stopped: return finished.ending != .neverStarted
        }
    }

    /// Removes a start waiter that gave up; its continuation, if it was still waiting.
    @inlinable
    mutating func removeStartWaiter(_ id: UInt64) -> CheckedContinuation<Bool, Never>? {
        guard let index = startWaiters.firstIndex(where: { $0.id == id }) else { return nil }
        return startWaiters.remove(at: index).waiter
    }

    /// Starts running on `host`: claims every loop created so far; each, with what it starts with, and
    /// the tasks waiting for the start.
    @inlinable
    mutating func start(
        _ host: Host
    ) throws(LoopError) -> ([(Member, Dispatch<Effect, Event>)], [CheckedContinuation<Bool, Never>]) {
        switch phase {
        case .created: break
        case .running, .stopping: throw .alreadyRunning
        case .stopped: throw .alreadyStopped
        }
        phase = .running(host)
        var started: [(Member, Dispatch<Effect, Event>)] = []
        for loop in loops.values {
            if let first = try? loop.claim(for: host) { started.append((loop, first)) }
        }
        defer { startWaiters = [] }
        return (started, startWaiters.map { $0.waiter })
    }

    /// Graceful stop: the host to stop (if running) and the loops to stop. A group that never ran stops
    /// for good, in the same step releasing the tasks waiting for it to start (it never will). A group
    /// already stopping hands back its host alone, so a shorter grace period can bring the deadline
    /// forward.
    @inlinable
    mutating func stop() -> GroupStop<Member>? {
        switch phase {
        case .created:
            phase = .stopped
            finished.ending = .neverStarted
            defer { startWaiters = [] }
            return GroupStop(host: nil, loops: all, startWaiters: startWaiters.map { $0.waiter }, first: true)
        case .running(let host):
            phase = .stopping(host)
            return GroupStop(host: host, loops: all, startWaiters: [], first: true)
        case .stopping(let host):
            return GroupStop(host: host, loops: [], startWaiters: [], first: false)
        case .stopped:
            return nil
        }
    }

    /// Takes the loop for `id` out, so a later event for `id` starts a new one; it finishes as retiring.
    @inlinable
    mutating func remove(_ id: ID) -> Member? {
        guard let loop = loops.removeValue(forKey: id) else { return nil }
        retiring[ObjectIdentifier(loop)] = loop
        return loop
    }

    /// A loop has stopped: a removed one (or one that stopped itself) is released and its report kept;
    /// one stopped with the whole group stays, so its final state is readable.
    @inlinable
    mutating func release(_ loop: Member, report: LoopReport) {
        guard retiring.removeValue(forKey: ObjectIdentifier(loop)) != nil else { return }
        finished = finished.adding(report)
    }

    /// A loop asked to stop itself: while the group runs, it retires as a removed one does (its id is
    /// free at once); `false` when it is not the group's loop for its id, or the group is stopping, in
    /// which case it stops with the group.
    @inlinable
    mutating func retire(_ loop: Member) -> Bool {
        guard case .running = phase, let id = loop.entity as? ID, loops[id] === loop else { return false }
        return remove(id) != nil
    }

    /// `run()` has returned: every loop, to abandon.
    @inlinable
    mutating func end() -> [Member] {
        phase = .stopped
        return all
    }

    /// How `run()` ended, for the report.
    @inlinable
    mutating func ended(_ ending: LoopReport.Ending?) {
        finished.ending = ending
    }
}

/// What a group's stop does: the host to stop (if the group runs), the loops to stop, the tasks
/// waiting for a start that will never come, and whether this is the group's first stop.
@usableFromInline
struct GroupStop<Member> {
    @usableFromInline
    var host: Host?
    @usableFromInline
    var loops: [Member]
    @usableFromInline
    var startWaiters: [CheckedContinuation<Bool, Never>]
    @usableFromInline
    var first: Bool

    @inlinable
    init(host: Host?, loops: [Member], startWaiters: [CheckedContinuation<Bool, Never>], first: Bool) {
        self.host = host
        self.loops = loops
        self.startWaiters = startWaiters
        self.first = first
    }
}
