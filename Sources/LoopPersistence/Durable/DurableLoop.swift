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
///   in. Apply backpressure with ``sendDurably(_:)``, which returns once the event is on disk.
/// - **Failure.** If the store fails (or an event on disk no longer decodes), the loop stops: it
///   performs no effect of an unrecorded event, refuses what is sent afterwards, and ``run()`` throws
///   ``DurableLoopError/storeFailed(_:)`` naming the stream and version.
public final class DurableLoop<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// The loop that runs the durable program.
    public typealias Core = Loop<
        DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
    >

    /// The underlying loop, for its report and states; send through ``send(_:)`` and ``sendDurably(_:)``.
    public let core: Core
    @usableFromInline let tickets: Tickets
    @usableFromInline let failures: Failures

    /// Creates a durable loop keeping its events in `stream` of `store`.
    ///
    /// - Parameters:
    ///   - stream: the stream's name; one loop per stream at a time.
    ///   - program: the initial state, the update, and what to resume on start.
    ///   - router: how the program's effects are performed.
    ///   - store: where the events and snapshots go.
    ///   - events: how events are encoded.
    ///   - states: how snapshots of the state are encoded.
    ///   - snapshotEvery: save a snapshot after this many events (`nil`: never).
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
        sources: [any EventSource<Event>] = [],
        failureGrace: Duration = .seconds(5),
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        let tickets = Tickets()
        let failures = Failures()
        self.failures = failures
        let storage = DurableStorage(
            store: store,
            events: events,
            states: states,
            initial: program.initial,
            update: program.update
        )
        self.tickets = tickets
        core = Loop(
            program: Program(
                first: First(
                    state: DurableState(stream: stream, initial: program.initial),
                    effects: [.recover(stream: stream)]
                ),
                update: program.durableUpdate(snapshotEvery: snapshotEvery)
            ),
            effects: storage.router(for: router, tickets: tickets, failureGrace: failureGrace, failed: failures.record),
            sources: sources.map { source in
                ClosureEventSource { send in try await source.run(send: send.map { .event($0, ticket: nil) }) }
            },
            observer: observer.map { DurableObserver<State, Event, Effect>($0) },
            clock: clock
        )
    }

    /// Sends `event`; returns whether it was taken. Never waits (see ``/LoopRuntime/Loop/send(_:)``).
    /// Once the store has failed, every event is refused with ``/LoopCore/Rejection/failed``.
    @inlinable
    @discardableResult
    public func send(_ event: Event) -> Delivery {
        deliver(.event(event, ticket: nil))
    }

    @inlinable
    func deliver(_ input: DurableInput<State, Event>) -> Delivery {
        if failures.any.load(ordering: .acquiring) { return .rejected(.failed) }
        return core.send(input)
    }

    /// Sends `event` and returns once it is durable, with its version in the stream: the moment a service
    /// may acknowledge its own client.
    ///
    /// - Throws: ``DurableLoopError/rejected(_:)`` when the loop refuses it,
    ///   ``DurableLoopError/storeFailed(_:)`` when the store fails first, ``DurableLoopError/ended`` when
    ///   the loop ends before (the event may then have been recorded or not).
    @inlinable
    public func sendDurably(_ event: Event) async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            let ticket = tickets.register(continuation)
            if case .rejected(let rejection) = deliver(.event(event, ticket: ticket)) {
                tickets.refuse([ticket], with: DurableLoopError.rejected(rejection))
            }
        }
    }

    /// The program's state, after every event processed so far (durable or about to be).
    public var state: State {
        core.state.state
    }

    /// The version of the last durable event.
    public var version: UInt64 {
        core.state.recorded
    }

    /// Runs the loop: recovers its stream, then processes events until stopped or cancelled.
    ///
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` when the store failed or the stream could not be
    ///   read back; a `LoopError` as ``/LoopRuntime/Loop/run()`` does.
    @discardableResult
    public func run() async throws -> LoopReport {
        let report: LoopReport
        do {
            report = try await core.run()
        } catch {
            tickets.refuseAll(with: DurableLoopError.ended)
            throw error
        }
        tickets.refuseAll(with: DurableLoopError.ended)
        if case .failed(let reason) = core.state.phase { throw DurableLoopError.storeFailed(reason) }
        return report
    }

    /// Stops the loop gracefully (see ``/LoopRuntime/Loop/stop(gracePeriod:)``): appends under way finish,
    /// and effects of recorded events get the grace period.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        core.stop(gracePeriod: gracePeriod)
        // Stopped before it ran: its queued events are dropped, so nobody may wait for them.
        if !core.isRunning { tickets.refuseAll(with: DurableLoopError.ended) }
    }

    /// Waits until ``run()`` has started; see ``/LoopRuntime/Loop/waitUntilRunning()``.
    public func waitUntilRunning() async -> Bool {
        await core.waitUntilRunning()
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
            sources: sources,
            failureGrace: failureGrace,
            observer: observer,
            clock: clock
        )
    }
}
