public import EffectHandlers
public import LoopCore
public import LoopRuntime
public import Synchronization

/// Durable entities: one durable loop per id, each with its own stream, created on its first event
/// (recovering whatever its stream holds) and passivated when idle, so a group can hold millions of
/// entities with memory bounded by the active ones.
///
/// ```swift
/// let orders = DurableLoopGroup<OrderID, Order, Order.Event, Order.Effect>(
///     program: DurableProgram(initial: Order(), update: Update(Order.update), resume: Order.resume),
///     effects: router,
///     store: store,
///     passivation: .init(idleAfter: .seconds(60), maximumLive: 10_000)
/// )
/// orders.send(.placed(item), to: id)
/// try await orders.sendDurably(.paid, to: id)     // returns once the event is on disk
/// ```
///
/// Each entity behaves as a ``DurableLoop``: its events are in the store before their effects start;
/// it recovers from its latest snapshot and the events after it; a store failure (or an event that no
/// longer decodes) stops that entity only, which then refuses events (``/LoopCore/Rejection/failed``)
/// while the others go on. Passivation takes an entity out of memory only when it is quiet (nothing on its way
/// to the store, no effect under way, nothing queued), checked in one step with its removal, so a
/// passivated entity loses nothing; its next event recovers it. Each entity's inbox is unbounded (the
/// store's replies must always get in); apply backpressure with ``sendDurably(_:to:key:)``.
public final class DurableLoopGroup<ID: Hashable & Sendable, State: Sendable, Event: Sendable, Effect: Sendable>:
    Sendable
{
    /// When the group passivates idle entities.
    public struct Passivation: Sendable {
        /// Passivate an entity that received no event for at least this long (and at most twice it).
        public var idleAfter: Duration?
        /// Past this many live entities, passivate the least recently created quiet ones.
        public var maximumLive: Int?

        /// Keeps every entity live until the group stops.
        public static var never: Passivation { Passivation() }

        /// Passivation after `idleAfter` without events, or beyond `maximumLive` live entities.
        public init(idleAfter: Duration? = nil, maximumLive: Int? = nil) {
            self.idleAfter = idleAfter
            self.maximumLive = maximumLive
        }
    }

    /// The durable update every entity runs (``DurableProgram/durableUpdate(snapshotEvery:remembering:)``).
    public typealias DurableUpdate = Update<
        DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
    >

    /// The group that runs the entities' durable programs.
    public typealias Underlying = LoopGroup<
        ID, DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
    >

    /// The underlying group, running the durable programs: its report counts the store's work with the
    /// programs' (see ``report``). Send through ``send(_:to:key:)`` and ``sendDurably(_:to:key:)``.
    public let underlying: Underlying
    @usableFromInline let callers: Callers<State>
    @usableFromInline let storage: DurableStorage<State, Event, Effect>
    @usableFromInline let streamOf: @Sendable (ID) -> String
    @usableFromInline let passivation: Passivation
    @usableFromInline let clock: any Clock<Duration>
    @usableFromInline let residents: Locked<Residents<ID>>
    @usableFromInline let failures: Failures
    @usableFromInline let passivated: Count
    @usableFromInline let tally: StoreTally
    @usableFromInline let memory: WorkMemory<ID>?
    /// The program's router's scope: what it captures where an event is sent travels with the event.
    @usableFromInline let scope: EffectScope<Effect>?

    /// Creates a group keeping each entity's events in its stream, `stream(id)`, each entity running the
    /// program `program(id)` (which may depend on the id, as ``/LoopRuntime/LoopGroup``'s does).
    ///
    /// - Parameters:
    ///   - stream: the stream of an id (its description by default); distinct ids need distinct streams.
    ///   - program: the program of an entity; called when the entity starts (first event, or recovery
    ///     after passivation).
    ///   - router: how the programs' effects are performed (replies need no route: the group delivers
    ///     them).
    ///   - store: where the events and snapshots go.
    ///   - events: how events are encoded.
    ///   - states: how snapshots are encoded.
    ///   - snapshotEvery: save an entity's snapshot after this many of its events (`nil`: never).
    ///   - keysKept: how many callers' keys each entity remembers (see ``KeyWindow``).
    ///   - passivation: when to passivate idle entities.
    ///   - memory: where the group remembers its entities with work under way, so ``run()`` wakes
    ///     exactly those (see ``WorkMemory``); `nil`: an entity wakes on its first event only.
    ///   - failureGrace: how long effects of recorded events may finish after an entity's store fails.
    ///   - observer: sees the programs' own events and effects, with the entity's id (the store's work
    ///     is left out, as ``DurableObserver`` does).
    ///   - clock: the clock timeouts, grace periods and idleness are measured on.
    @inlinable
    public convenience init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: @escaping @Sendable (ID) -> DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        passivation: Passivation = .never,
        remembering memory: WorkMemory<ID>? = nil,
        failureGrace: Duration = .seconds(5),
        observer: (any LoopGroupObserver<ID, Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            stream: stream,
            source: .perEntity(program),
            effects: router,
            store: store,
            events: events,
            states: states,
            snapshotEvery: snapshotEvery,
            keysKept: keysKept,
            passivation: passivation,
            remembering: memory,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }

    /// The group, its entities' programs from `source`.
    @inlinable
    init(
        stream: @escaping @Sendable (ID) -> String,
        source: ProgramSource<ID, State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64?,
        keysKept: Int,
        passivation: Passivation,
        remembering memory: WorkMemory<ID>?,
        failureGrace: Duration,
        observer: (any LoopGroupObserver<ID, Event, Effect>)?,
        clock: any Clock<Duration>
    ) {
        let callers = Callers<State>(clock: clock)
        let failures = Failures()
        self.failures = failures
        let tally = StoreTally()
        self.tally = tally
        self.scope = router.scope
        // A per-entity program, from the entity's start to its recovery (which reads its stream back).
        let starting = Locked<[String: DurableProgram<State, Event, Effect>]>([:])
        // One program for all: one durable update for all, so an entity costs no closure of its own.
        let remembers = memory != nil
        let shared: (program: DurableProgram<State, Event, Effect>, update: DurableUpdate)? =
            if case .shared(let program) = source {
                (program, tally.counting(program.durableUpdate(snapshotEvery: snapshotEvery, remembering: remembers)))
            } else {
                nil
            }
        self.memory = memory
        let storage = DurableStorage(
            store: store,
            events: events,
            states: states,
            keysKept: keysKept,
            clock: clock,
            ledger: memory.map { WorkLedger(store: store, stream: $0.stream) }
        ) { name in
            shared?.program ?? starting.withLock { $0.removeValue(forKey: name) }
        }
        self.storage = storage
        self.callers = callers
        self.streamOf = stream
        self.passivation = passivation
        self.clock = clock
        self.residents = Locked(Residents<ID>())
        self.passivated = Count()
        underlying = LoopGroup(
            program: { id in
                let name = stream(id)
                let (program, update): (DurableProgram<State, Event, Effect>, DurableUpdate)
                switch source {
                case .shared(let one):
                    (program, update) = (
                        one,
                        shared?.update
                            ?? tally.counting(one.durableUpdate(snapshotEvery: snapshotEvery, remembering: remembers))
                    )
                case .perEntity(let make):
                    program = make(id)
                    update = tally.counting(program.durableUpdate(snapshotEvery: snapshotEvery, remembering: remembers))
                    starting.withLock { $0[name] = program }
                }
                return Program(
                    first: First(
                        state: DurableState(stream: name, initial: program.initial, keysKept: keysKept),
                        effects: [.recover(stream: name)]
                    ),
                    update: update
                )
            },
            effects: storage.router(
                for: router,
                callers: callers,
                failureGrace: failureGrace,
                tally: tally,
                failed: failures.note
            ),
            observer: observer.map { observer in
                ClosureLoopGroupObserver<ID, DurableInput<State, Event>, DurableEffect<State, Event, Effect>> {
                    activity,
                    entity in
                    // The group's own end reports the programs' work; an entity's end (its passivation)
                    // reports its loop's counts as they are, the store's work included.
                    if entity == nil, case .stopped(let report) = activity {
                        observer.observe(.stopped(tally.program(report)), of: nil)
                    } else if let mapped = DurableObserver<State, Event, Effect>.program(activity) {
                        observer.observe(mapped, of: entity)
                    }
                }
            },
            clock: clock
        )
    }

    /// Creates a group whose entities all run `program`; see
    /// ``init(stream:program:effects:store:events:states:snapshotEvery:keysKept:passivation:remembering:failureGrace:observer:clock:)``.
    @inlinable
    public convenience init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        passivation: Passivation = .never,
        remembering memory: WorkMemory<ID>? = nil,
        failureGrace: Duration = .seconds(5),
        observer: (any LoopGroupObserver<ID, Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            stream: stream,
            source: .shared(program),
            effects: router,
            store: store,
            events: events,
            states: states,
            snapshotEvery: snapshotEvery,
            keysKept: keysKept,
            passivation: passivation,
            remembering: memory,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }

    /// Sends `event` to the entity `id`, recovering it first if it is not live. Never waits.
    ///
    /// With a `key`, an event whose key the entity has recorded is not applied again (see ``KeyWindow``);
    /// a key that cannot be used (``KeyLimits``), or a keyed event that does not encode, is refused with
    /// ``/LoopCore/Rejection/invalid``.
    @inlinable
    @discardableResult
    public func send(_ event: Event, to id: ID, key: String? = nil) -> Delivery {
        guard let key else { return deliver(.event(event, ticket: nil), to: id) }
        guard let call = try? storage.durableCall(event, key: key) else { return .rejected(.invalid) }
        return deliver(.call(call), to: id)
    }

    /// Sends `event` to the entity `id` and returns once it is durable, with its version in the entity's
    /// stream. With a `key` the entity has recorded, returns the first try's version without applying the
    /// event again. Throws as ``DurableLoop/sendDurably(_:key:)`` does.
    @inlinable
    public func sendDurably(_ event: Event, to id: ID, key: String? = nil) async throws -> UInt64 {
        let call = try storage.durableCall(event, key: key)
        return try await callers.sendDurably(
            event,
            as: call,
            deliver: { deliver($0, to: id) },
            refusal: { rejection in rejection == .failed ? failure(of: id) : .rejected(rejection) }
        )
    }

    /// Sends the event `make` builds around a new ``/LoopCore/ReplyTo`` to the entity `id` and waits for
    /// the reply its program decides, released once the event that decided it is recorded. Keys, errors
    /// and timeouts as ``DurableLoop/request(key:timeout:_:)``.
    ///
    /// ```swift
    /// let outcome = try await accounts.request(to: id, key: requestID, timeout: .seconds(2)) {
    ///     .withdraw(50, replyTo: $0)
    /// }
    /// ```
    @inlinable
    public func request<Value: Sendable>(
        to id: ID,
        key: String? = nil,
        timeout: Duration? = nil,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        try await callers.requests.ask(
            stream: streamOf(id),
            key: key,
            timeout: timeout,
            make: make,
            // A closure, not `storage.fingerprint(of:)`: that partial application copied the whole storage
            // (and retained each of its references) on every request.
            fingerprint: { try storage.fingerprint(of: $0) },
            deliver: { deliver(.call($0), to: id) },
            refusal: { rejection in
                if rejection == .failed, case .storeFailed(let failure) = failure(of: id) {
                    .storeFailed(failure.description)
                } else {
                    .rejected(rejection)
                }
            }
        )
    }

    /// For code of this package that answers callers in another process (a cluster node): sends the
    /// request `call` (its key, digest and reply address made by the caller) to the entity `id`, and
    /// hands `waiter` what becomes of the reply address: the answer once recorded (a repeat of the key
    /// gets the recorded one), or the error that ends the wait. `waiter` waits as long as the group
    /// runs: a program that never answers keeps it until the group stops.
    /// Inlinable, so a caller that knows the program's types runs it specialized.
    @inlinable
    package func forward(_ call: DurableCall<Event>, to id: ID, waiter: any AnswerWaiter) {
        guard let reply = call.reply else {
            waiter.fail(.invalid("a forwarded call must be a request"))
            return
        }
        let stream = streamOf(id)
        let ticket = ticketNumbers.add(1, ordering: .relaxed).newValue
        callers.requests.register(waiter, ticket: ticket, reply: reply, in: stream)
        var call = call
        call.ticket = ticket
        if case .rejected(let rejection) = deliver(.call(call), to: id) {
            callers.requests.remove(ticket: ticket, reply: reply, in: stream)
            if rejection == .failed, case .storeFailed(let failure) = failure(of: id) {
                waiter.fail(.storeFailed(failure.description))
            } else {
                waiter.fail(.rejected(rejection))
            }
        }
    }

    /// The state of the entity `id` as of its last recorded event, recovering the entity if it is not
    /// live: returns once every event applied to it before the call is durable, with the state they made.
    /// An entity with no events has the program's initial state.
    ///
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` when the entity's store failed (or its stream does
    ///   not decode), ``DurableLoopError/rejected(_:)`` when the group refuses it (stopping),
    ///   ``DurableLoopError/ended`` when the group ends first.
    public func durableState(of id: ID) async throws -> State {
        try await withCheckedThrowingContinuation { continuation in
            let ticket = callers.readers.register(continuation)
            if case .rejected(let rejection) = deliver(.read(ticket: ticket), to: id) {
                callers.readers.refuse([ticket], with: rejection == .failed ? failure(of: id) : .rejected(rejection))
            }
        }
    }

    /// Why the entity `id` refuses events: its store's failure.
    @usableFromInline
    func failure(of id: ID) -> DurableLoopError {
        let stream = streamOf(id)
        return .storeFailed(
            failures.reasons.withLock { $0[stream] }
                ?? DurableFailure(.storeError("stream '\(stream)' failed"), stream: stream)
        )
    }

    @inlinable
    func deliver(_ input: DurableInput<State, Event>, to id: ID) -> Delivery {
        if failures.any.load(ordering: .acquiring), failures.reasons.withLock({ $0[streamOf(id)] }) != nil {
            return .rejected(.failed)
        }
        // Who is live, and since when, matters only to passivation: a group without it takes no lock here.
        let passivates = passivation.maximumLive != nil || passivation.idleAfter != nil
        let overflowing =
            passivates
            && residents.withLock { residents -> Bool in
                residents.touch(id)
                return passivation.maximumLive.map { residents.count > $0 } ?? false
            }
        // On the sender's task: what the scope captures here reaches the scope around the event's effects.
        let input = input.carrying(capturedBy: scope)
        var delivery = underlying.send(input, to: id)
        if case .read = input { tally.sent(delivery) }
        // A loop passivated after this sender found it refuses; looking again starts a new one.
        var attempts = 0
        while case .rejected(let rejection) = delivery, rejection == .stopping || rejection == .stopped,
            underlying.isRunning, attempts < 3
        {
            attempts += 1
            delivery = underlying.send(input, to: id)
            if case .read = input { tally.sent(delivery) }
        }
        if overflowing { passivateOldest() }
        return delivery
    }

    /// The live state of an entity, or `nil` for one that is not live (never sent to, or passivated).
    ///
    /// It may be ahead of the store (events applied but not yet recorded) and, while the entity
    /// recovers, is the program's initial state: read ``durableState(of:)`` for the state as recorded.
    public func state(of id: ID) -> State? {
        underlying.state(of: id)?.state
    }

    /// Replies that reached nobody: their caller had given up or had its answer already, or the request
    /// came before a restart. Replies to callers of events that were never recorded (an entity's store
    /// failed) are counted in that entity's state (``DurableState/droppedReplies``).
    public var droppedReplies: Int {
        callers.requests.dropped.load(ordering: .relaxed)
    }

    /// How many entities are live.
    public var count: Int {
        underlying.count
    }

    /// Starts the entity `id` (recovering it from its stream) without sending it an event: to warm a
    /// group up before traffic. Nothing happens to an entity that is live.
    public func wake(_ id: ID) {
        // An acknowledgement of version 0 changes nothing in any phase: it only brings the entity up.
        _ = deliver(.recorded(upTo: 0), to: id)
    }

    /// How many times an entity was recovered (read back from its stream) so far: once per start of an
    /// entity, so after passivation too.
    public var recoveries: Int {
        tally.recoveries.load(ordering: .relaxed)
    }

    /// How many entities were passivated so far.
    public var passivations: Int {
        passivated.value.load(ordering: .relaxed)
    }

    /// The streams whose entities failed, with why. Such an entity refuses events until the process
    /// restarts, or until ``forgetFailure(of:)``.
    public var failedStreams: [String: DurableFailure] {
        failures.reasons.withLock { $0 }
    }

    /// Lets the entity `id`, stopped by a failure, start again: its next event (or ``wake(_:)``) recovers
    /// it from its stream anew, as after a restart. For a supervisor that retries a failed entity once
    /// the cause may be gone (a fixed record, a new release); if it fails again, it is in
    /// ``failedStreams`` again. Returns whether it had failed.
    @discardableResult
    public func forgetFailure(of id: ID) -> Bool {
        failures.forget(streamOf(id))
    }

    /// What the programs have done so far (once stopped, how the group stopped): their own events and
    /// effects, summed over every entity, passivated ones included. The store's work is in ``storeWork``.
    public var report: LoopReport {
        tally.program(underlying.report)
    }

    /// What the group did for its store so far: recoveries, appends, snapshots, repeated calls.
    public var storeWork: StoreWork {
        tally.work
    }

    /// Runs the group until stopped or cancelled; passivates idle entities meanwhile. Returns what the
    /// programs did (see ``report``).
    ///
    /// A group that remembers work (see ``WorkMemory``) first reads its marks back and wakes each
    /// entity marked as having work under way; it returns once its last marks are written.
    ///
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` when the marks cannot be read back (before any
    ///   entity starts); a `LoopError` as ``/LoopRuntime/LoopGroup/run()`` does.
    @inlinable
    @discardableResult
    public func run() async throws -> LoopReport {
        let sweeper = try await beforeRun()
        defer { sweeper?.cancel() }
        // Inlined into the caller, so the entities' drains are compiled for the programs' own types (see
        // ``/LoopRuntime/Loop/run()``).
        do {
            let report = try await underlying.run()
            await afterRun()
            return tally.program(report)
        } catch {
            await afterRun()
            throw error
        }
    }

    /// What `run()` does before the group runs: wakes the entities with work under way when the last run
    /// stopped, however it stopped; starts the passivation sweep, if any (returned, to cancel).
    @usableFromInline
    func beforeRun() async throws -> Task<Void, Never>? {
        if let memory, let ledger = storage.ledger {
            do {
                for stream in try await ledger.load().sorted() {
                    if let id = memory.id(stream) { wake(id) }
                }
            } catch {
                callers.end()
                throw error
            }
        }
        return passivation.idleAfter.map { interval in
            Task { [clock] in
                while !Task.isCancelled {
                    do { try await clock.sleep(for: interval) } catch { return }
                    self.sweep()
                }
            }
        }
    }

    /// What `run()` does once the group has stopped: no caller waits any longer, and the last marks and
    /// clears are written before the run returns.
    @usableFromInline
    func afterRun() async {
        callers.end()
        await storage.ledger?.flush()
    }

    /// Stops the group gracefully (see ``/LoopRuntime/LoopGroup/stop(gracePeriod:)``). Snapshots still to
    /// save are encoded at once, not when a processor is idle.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        // The snapshots still to save are part of the stop: encoded now, not when a processor is idle.
        storage.hurrySnapshots()
        underlying.stop(gracePeriod: gracePeriod)
        // Stopped before it ran: its queued events are dropped, so nobody may wait for them.
        if !underlying.isRunning { callers.end() }
    }

    /// Waits until ``run()`` has started.
    public func waitUntilRunning() async -> Bool {
        await underlying.waitUntilRunning()
    }

    /// Passivates `id` if it is quiet; returns whether it did.
    @discardableResult
    public func passivate(_ id: ID) -> Bool {
        guard underlying.passivate(id, when: \.isQuiet) else { return false }
        residents.withLock { $0.forget(id) }
        passivated.count()
        return true
    }

    /// Passivates quiet entities, oldest first, until the group is back within its cap; a busy one goes to
    /// the back of the line. Tries a few per call, so a send never pays for a long scan.
    @usableFromInline
    func passivateOldest() {
        guard let cap = passivation.maximumLive else { return }
        for _ in 0..<4 {
            guard let oldest = residents.withLock({ $0.count > cap ? $0.popOldest() : nil }) else { return }
            if !passivate(oldest) { keepOrForget(oldest) }
        }
    }

    /// Passivates every quiet entity that received nothing since the sweep before the last.
    private func sweep() {
        let idle = residents.withLock { $0.advance() }
        for id in idle where !passivate(id) { keepOrForget(id) }
        passivateOldest()
    }

    /// A busy entity goes to the back of the line; one that is no longer live (it failed, or stopped
    /// itself) leaves it.
    private func keepOrForget(_ id: ID) {
        let live = underlying.state(of: id) != nil
        residents.withLock { residents in
            if live { residents.requeue(id) } else { residents.forget(id) }
        }
    }
}

/// A count shared by reference: the group's counters live in these rather than in `Atomic` stored
/// properties of the generic group (whose inlinable initializer the 6.3 optimiser then fails to compile).
@usableFromInline
final class Count: Sendable {
    @usableFromInline let value = Atomic<Int>(0)

    @usableFromInline
    init() {}

    @usableFromInline
    @Sendable func count() {
        value.add(1, ordering: .relaxed)
    }
}

/// The streams whose entities failed, and a flag that spares sends the lookup while there are none.
@usableFromInline
final class Failures: Sendable {
    @usableFromInline let reasons = Locked<[String: DurableFailure]>([:])
    @usableFromInline let any = Atomic<Bool>(false)

    @usableFromInline
    init() {}

    @usableFromInline
    @Sendable func note(stream: String, reason: DurableFailure) {
        reasons.withLock { $0[stream] = reason }
        any.store(true, ordering: .releasing)
    }

    /// Removes `stream`'s failure; whether there was one. The flag is lowered under the lock, only when
    /// none is left: a failure recorded meanwhile raises it again after its insertion.
    func forget(_ stream: String) -> Bool {
        reasons.withLock { reasons in
            let removed = reasons.removeValue(forKey: stream) != nil
            if reasons.isEmpty { any.store(false, ordering: .releasing) }
            return removed
        }
    }
}

/// The live entities of a durable group, oldest first, with the sweep in which each last got an event.
@usableFromInline
struct Residents<ID: Hashable> {
    /// What the group knows of a live entity.
    @usableFromInline
    struct Entry {
        /// The sweep in which it last got an event.
        @usableFromInline var generation: UInt64
        /// Which place in the line is its own: the stamp it was last put in the line with.
        @usableFromInline var stamp: UInt64

        @inlinable
        init(generation: UInt64, stamp: UInt64) {
            self.generation = generation
            self.stamp = stamp
        }
    }

    /// Ids in the order they came or were put back, each with the stamp of that place. A place its id no
    /// longer holds (the id was forgotten, or put back since) is skipped when reached, and such places
    /// are swept out once they are as many as the live ids, so the line stays within about twice them.
    @usableFromInline var order = Queue<(id: ID, stamp: UInt64)>()
    @usableFromInline var seen: [ID: Entry] = [:]
    @usableFromInline var generation: UInt64 = 0
    @usableFromInline var stamps: UInt64 = 0

    @inlinable
    init() {}

    @inlinable
    var count: Int { seen.count }

    /// Notes an event for `id`; a new id goes to the end of the line.
    @inlinable
    mutating func touch(_ id: ID) {
        if let index = seen.index(forKey: id) {
            seen.values[index].generation = generation
        } else {
            stamps += 1
            seen[id] = Entry(generation: generation, stamp: stamps)
            enqueue(id, stamp: stamps)
        }
    }

    /// Puts `id` in the line with `stamp`, sweeping out the places no id holds when they pile up.
    @inlinable
    mutating func enqueue(_ id: ID, stamp: UInt64) {
        order.append((id, stamp))
        guard order.count > 2 * seen.count + 1_024 else { return }
        for place in order.removeAll() where seen[place.id]?.stamp == place.stamp {
            order.append(place)
        }
    }

    mutating func forget(_ id: ID) {
        seen.removeValue(forKey: id)
    }

    /// The oldest live id, taken off the line.
    mutating func popOldest() -> ID? {
        while let place = order.popFirst() {
            if seen[place.id]?.stamp == place.stamp { return place.id }
        }
        return nil
    }

    /// Puts a live id back at the end of the line.
    mutating func requeue(_ id: ID) {
        guard seen[id] != nil else { return }
        stamps += 1
        seen[id]?.stamp = stamps
        enqueue(id, stamp: stamps)
    }

    /// Starts a new sweep; returns the ids that got nothing during the whole previous one.
    mutating func advance() -> [ID] {
        generation += 1
        return seen.compactMap { id, entry in entry.generation + 2 <= generation ? id : nil }
    }
}

extension DurableLoopGroup where Event: Codable, State: Codable {
    /// A durable group whose events and snapshots are in the compact binary form (``BinaryCodec``), each
    /// entity running `program(id)`.
    @inlinable
    public convenience init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: @escaping @Sendable (ID) -> DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        passivation: Passivation = .never,
        remembering memory: WorkMemory<ID>? = nil,
        failureGrace: Duration = .seconds(5),
        observer: (any LoopGroupObserver<ID, Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            stream: stream,
            program: program,
            effects: router,
            store: store,
            events: BinaryCodec<Event>(),
            states: BinaryCodec<State>(),
            snapshotEvery: snapshotEvery,
            keysKept: keysKept,
            passivation: passivation,
            remembering: memory,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }

    /// A durable group whose events and snapshots are in the compact binary form (``BinaryCodec``), every
    /// entity running `program`.
    @inlinable
    public convenience init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        passivation: Passivation = .never,
        remembering memory: WorkMemory<ID>? = nil,
        failureGrace: Duration = .seconds(5),
        observer: (any LoopGroupObserver<ID, Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.init(
            stream: stream,
            source: .shared(program),
            effects: router,
            store: store,
            events: BinaryCodec<Event>(),
            states: BinaryCodec<State>(),
            snapshotEvery: snapshotEvery,
            keysKept: keysKept,
            passivation: passivation,
            remembering: memory,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }
}

/// Where a durable group's entities get their program.
@usableFromInline
enum ProgramSource<ID, State: Sendable, Event, Effect>: Sendable {
    /// One program for every entity.
    case shared(DurableProgram<State, Event, Effect>)
    /// A program for each id.
    case perEntity(@Sendable (ID) -> DurableProgram<State, Event, Effect>)
}

extension DurableLoopGroup: Runnable {}
