public import EffectHandlers
public import EventSources
public import LoopCore
public import LoopRuntime
public import Synchronization

/// A loop whose events outlive its process: each event is in its store before its effects start, and
/// a restarted loop reads its stream back (latest snapshot, then the events after it) and goes on.
///
/// ```swift
/// let store = try FileEventStore(directory: "/var/lib/jobs")
/// let loop = DurableLoop(
///     stream: "jobs",
///     program: DurableProgram(initial: Jobs(), update: Update(Jobs.update), resume: Jobs.resume),
///     effects: router,
///     store: store
/// )
/// loop.send(.submitted(job))                            // as a Loop: never waits
/// let version = try await loop.sendDurably(.submitted(job))  // returns once the event is on disk
/// try await loop.run()
/// ```
///
/// - **Write-ahead.** An event is applied to the state when it is processed, and its effects start once
///   the store has it. Events from effect handlers are recorded the same way: they are inputs of the
///   update. Events are appended in batches: one append under way per loop, and what arrives meanwhile
///   goes in the next (a ``FileEventStore`` also writes the appends of many loops together).
/// - **Recovery.** ``run()`` first reads the stream back; events sent meanwhile wait. Effects of replayed
///   events are not performed again; the program's ``DurableProgram/resume`` says what work to resume.
/// - **Snapshots** every `snapshotEvery` events, so recovery reads only what happened since.
/// - **Inbox.** Unbounded: the store's replies go through the same inbox as events, and must always get
///   in. Apply backpressure with ``sendDurably(_:key:)``, which returns once the event is on disk.
/// - **Failure.** If the store fails (or an event on disk no longer decodes), the loop stops: it
///   performs no effect of an unrecorded event, refuses what is sent afterwards, and ``run()`` throws
///   ``DurableLoopError/storeFailed(_:)`` naming the stream and version.
public final class DurableLoop<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// The loop that runs the durable program.
    public typealias Underlying = Loop<
        DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
    >

    /// The underlying loop, running the durable program: its report counts the store's work with the
    /// program's (see ``report``). Send through ``send(_:key:)`` and
    /// ``sendDurably(_:key:)``.
    public let underlying: Underlying
    @usableFromInline let stream: String
    @usableFromInline let storage: DurableStorage<State, Event, Effect>
    @usableFromInline let callers: Callers<State>
    @usableFromInline let failures: Failures
    @usableFromInline let tally: StoreTally
    /// The program's router's scope: what it captures where an event is sent travels with the event.
    @usableFromInline let scope: EffectScope<Effect>?

    /// Creates a durable loop keeping its events in `stream` of `store`.
    ///
    /// - Parameters:
    ///   - stream: the stream's name; one loop per stream at a time.
    ///   - program: the initial state, the update, what to resume on start, and how it answers requests.
    ///   - router: how the program's effects are performed (replies need no route: the loop delivers them).
    ///   - store: where the events and snapshots go.
    ///   - events: how events are encoded.
    ///   - states: how snapshots of the state are encoded.
    ///   - snapshotEvery: save a snapshot after this many events (`nil`: never).
    ///   - keysKept: how many callers' keys the loop remembers (see ``KeyWindow``).
    ///   - sources: event sources, run while the loop runs; their events are recorded like any other.
    ///   - failureGrace: how long effects of recorded events may finish after the store fails.
    ///   - observer: sees the program's events and effects, as for a plain loop (see
    ///     ``DurableObserver``).
    ///   - clock: the clock timeouts and grace periods are measured on.
    @inlinable
    public init(
        stream: String,
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        sources: [any EventSource<Event>] = [],
        failureGrace: Duration = .seconds(5),
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        let callers = Callers<State>(clock: clock)
        let failures = Failures()
        self.failures = failures
        let tally = StoreTally()
        self.tally = tally
        self.scope = router.scope
        self.stream = stream
        let storage = DurableStorage(
            store: store,
            events: events,
            states: states,
            keysKept: keysKept,
            clock: clock
        ) { _ in program }
        self.storage = storage
        self.callers = callers
        underlying = Loop(
            program: Program(
                first: First(
                    state: DurableState(stream: stream, initial: program.initial, keysKept: keysKept),
                    effects: [.recover(stream: stream)]
                ),
                update: tally.counting(program.durableUpdate(snapshotEvery: snapshotEvery))
            ),
            effects: storage.router(
                for: router,
                callers: callers,
                failureGrace: failureGrace,
                tally: tally,
                failed: failures.note
            ),
            sources: sources.map { [scope = router.scope] source in
                ClosureEventSource { send in
                    try await source.run(
                        send: send.map { .event($0, ticket: nil, context: .captured(by: scope)) }
                    )
                }
            },
            observer: observer.map { DurableObserver<State, Event, Effect>($0, tally: tally) },
            clock: clock
        )
    }

    /// Sends `event`; returns whether it was taken. Never waits (see ``/LoopRuntime/Loop/send(_:)``).
    /// Once the store has failed, every event is refused with ``/LoopCore/Rejection/failed``.
    ///
    /// With a `key`, an event whose key the loop has recorded is not applied again (see ``KeyWindow``); a
    /// key that is empty or too long (``KeyLimits``), or a keyed event that does not encode, is refused
    /// with ``/LoopCore/Rejection/invalid``.
    @inlinable
    @discardableResult
    public func send(_ event: Event, key: String? = nil) -> Delivery {
        guard key != nil else { return deliver(.event(event, ticket: nil)) }
        guard let call = try? storage.durableCall(event, key: key) else { return .rejected(.invalid) }
        return deliver(.call(call))
    }

    @inlinable
    func deliver(_ input: DurableInput<State, Event>) -> Delivery {
        if failures.any.load(ordering: .acquiring) { return .rejected(.failed) }
        // On the sender's task: what the scope captures here reaches the scope around the event's effects.
        let delivery = underlying.send(input.carrying(capturedBy: scope))
        if case .read = input { tally.sent(delivery) }
        return delivery
    }

    /// Sends `event` and returns once it is durable, with its version in the stream: the moment a service
    /// may acknowledge its own client.
    ///
    /// With a `key` the loop has recorded, the event is not applied again: the call returns the version
    /// the first try's event was recorded at (once it is durable).
    ///
    /// - Throws: ``DurableLoopError/rejected(_:)`` when the loop refuses it,
    ///   ``DurableLoopError/storeFailed(_:)`` when the store fails first, ``DurableLoopError/ended`` when
    ///   the loop ends before (the event may then have been recorded or not),
    ///   ``DurableLoopError/keyReused(_:)`` when the key was recorded with another event, and
    ///   ``DurableLoopError/invalid(_:)`` for a key that cannot be used.
    @inlinable
    public func sendDurably(_ event: Event, key: String? = nil) async throws -> UInt64 {
        let call = try storage.durableCall(event, key: key)
        return try await callers.sendDurably(event, as: call, deliver: deliver, refusal: { .rejected($0) })
    }

    /// Sends the event `make` builds around a new ``/LoopCore/ReplyTo`` and waits for the reply the
    /// program decides, released only once the event that decided it is recorded (reply after commit).
    ///
    /// ```swift
    /// let outcome = try await account.request(key: requestID, timeout: .seconds(2)) { .withdraw(50, replyTo: $0) }
    /// ```
    ///
    /// The program answers as an in-memory one does, with an effect holding `replyTo.reply(value)`, now or
    /// from a later event; it must say which effects are replies (``DurableProgram/replying(_:)``). With a
    /// `key`, a repeat (after a timeout, a crash, a restart of either side) is not applied again: it gets
    /// the recorded answer, or waits for it with the first try. For a keyed request `make` is called twice
    /// (once with a placeholder address, for the event's digest): it must build the same event from the
    /// same address. Give requests a `timeout`: a request the program never answers otherwise waits until
    /// the loop stops. A wait ends:
    /// - ``/LoopRuntime/RequestError/rejected(_:)`` when the loop does not take the event;
    /// - ``/LoopRuntime/RequestError/storeFailed(_:)`` when the store fails before the reply is recorded;
    /// - ``/LoopRuntime/RequestError/loopStopped`` when the loop stops first;
    /// - ``/LoopRuntime/RequestError/timedOut(after:)`` when `timeout` (on the loop's clock) passes first;
    /// - ``/LoopRuntime/RequestError/cancelled`` when the waiting task is cancelled;
    /// - ``/LoopRuntime/RequestError/keyReused(_:)`` when the key was recorded with another event;
    /// - ``/LoopRuntime/RequestError/invalid(_:)`` for a key that cannot be used, a program without
    ///   replies, or a reply of another type than `Value`.
    @inlinable
    public func request<Value: Sendable>(
        key: String? = nil,
        timeout: Duration? = nil,
        _ make: (ReplyTo<Value>) -> Event
    ) async throws(RequestError) -> Value {
        let failures = self.failures
        let stream = self.stream
        return try await callers.requests.ask(
            stream: stream,
            key: key,
            timeout: timeout,
            make: make,
            // A closure, not `storage.fingerprint(of:)`: that partial application copied the whole storage
            // (and retained each of its references) on every request.
            fingerprint: { try storage.fingerprint(of: $0) },
            deliver: { deliver(.call($0)) },
            refusal: { rejection in
                rejection == .failed
                    ? .storeFailed(failures.reasons.withLock { $0[stream] }?.description ?? "\(rejection)")
                    : .rejected(rejection)
            }
        )
    }

    /// The program's state as of the last recorded event: returns once every event applied before the
    /// call is durable, with the state they made (never one with events the store may still lose).
    ///
    /// - Throws: as ``sendDurably(_:key:)`` does.
    public func durableState() async throws -> State {
        try await withCheckedThrowingContinuation { continuation in
            let ticket = callers.readers.register(continuation)
            if case .rejected(let rejection) = deliver(.read(ticket: ticket)) {
                callers.readers.refuse([ticket], with: DurableLoopError.rejected(rejection))
            }
        }
    }

    /// The program's state, after every event processed so far: live, and possibly ahead of the store
    /// (see ``durableState()`` for the state as recorded).
    public var state: State {
        underlying.state.state
    }

    /// The version of the last durable event.
    public var version: UInt64 {
        underlying.state.recorded
    }

    /// Replies that reached nobody: their caller had given up or had its answer already, or the
    /// request came before a restart. Replies to callers of events that were never recorded (the store
    /// failed) are counted in the underlying loop's state (``DurableState/droppedReplies``).
    public var droppedReplies: Int {
        callers.requests.dropped.load(ordering: .relaxed)
    }

    /// What the program has done so far (once stopped, how the loop stopped): its own events and effects.
    /// The store's work is in ``storeWork``.
    public var report: LoopReport {
        tally.program(underlying.report)
    }

    /// What the loop did for its store so far: recoveries, appends, snapshots, repeated calls.
    public var storeWork: StoreWork {
        tally.work
    }

    /// Runs the loop: recovers its stream, then processes events until stopped or cancelled. Returns
    /// what the program did (see ``report``).
    ///
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` when the store failed or the stream could not be
    ///   read back; a `LoopError` as ``/LoopRuntime/Loop/run()`` does.
    @inlinable
    @discardableResult
    public func run() async throws -> LoopReport {
        // Inlined into the caller, so the loop's drain is compiled for the program's own types (see
        // ``/LoopRuntime/Loop/run()``).
        let report: LoopReport
        do {
            report = try await underlying.run()
        } catch {
            callers.end()
            throw error
        }
        return try ended(report)
    }

    /// What `run()` returns once the loop has stopped with `report`: the program's report, or the
    /// store's failure.
    @usableFromInline
    func ended(_ report: LoopReport) throws -> LoopReport {
        callers.end()
        if case .failed(let reason) = underlying.state.phase { throw DurableLoopError.storeFailed(reason) }
        return tally.program(report)
    }

    /// Stops the loop gracefully (see ``/LoopRuntime/Loop/stop(gracePeriod:)``): appends under way finish,
    /// and effects of recorded events get the grace period. Snapshots still to save are encoded at once,
    /// not when a processor is idle.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        // The snapshots still to save are part of the stop: encoded now, not when a processor is idle.
        storage.hurrySnapshots()
        underlying.stop(gracePeriod: gracePeriod)
        // Stopped before it ran: its queued events are dropped, so nobody may wait for them.
        if !underlying.isRunning { callers.end() }
    }

    /// Waits until ``run()`` has started; see ``/LoopRuntime/Loop/waitUntilRunning()``.
    public func waitUntilRunning() async -> Bool {
        await underlying.waitUntilRunning()
    }
}

extension DurableLoop where Event: Codable, State: Codable {
    /// A durable loop whose events and snapshots are in the compact binary form (``BinaryCodec``).
    @inlinable
    public convenience init(
        stream: String,
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        snapshotEvery: UInt64? = 1_000,
        keysKept: Int = 1_000,
        sources: [any EventSource<Event>] = [],
        failureGrace: Duration = .seconds(5),
        observer: (any LoopObserver<Event, Effect>)? = nil,
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
            sources: sources,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }
}

extension DurableLoop: Runnable {}
