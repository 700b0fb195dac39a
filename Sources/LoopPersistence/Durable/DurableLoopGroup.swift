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
/// while the others go on. Passivation releases an entity only when it is quiet (nothing on its way
/// to the store, no effect under way, nothing queued), checked in one step with its removal, so a
/// passivated entity loses nothing; its next event recovers it. Each entity's inbox is unbounded (the
/// store's replies must always get in); apply backpressure with ``sendDurably(_:to:)``.
public final class DurableLoopGroup<ID: Hashable & Sendable, State: Sendable, Event: Sendable, Effect: Sendable>:
    Sendable
{
    /// When the group releases idle entities.
    public struct Passivation: Sendable {
        /// Release an entity that received no event for at least this long (and at most twice it).
        public var idleAfter: Duration?
        /// Past this many live entities, release the least recently created quiet ones.
        public var maximumLive: Int?

        /// Keeps every entity live until the group stops.
        public static var never: Passivation { Passivation() }

        /// Passivation after `idleAfter` without events, or beyond `maximumLive` live entities.
        public init(idleAfter: Duration? = nil, maximumLive: Int? = nil) {
            self.idleAfter = idleAfter
            self.maximumLive = maximumLive
        }
    }

    /// The group that runs the entities' durable programs.
    public typealias Core = LoopGroup<
        ID, DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
    >

    /// The underlying group, for its report; send through ``send(_:to:)`` and ``sendDurably(_:to:)``.
    public let core: Core
    @usableFromInline let tickets: Tickets
    @usableFromInline let streamOf: @Sendable (ID) -> String
    @usableFromInline let passivation: Passivation
    @usableFromInline let clock: any Clock<Duration>
    @usableFromInline let residents: Locked<Residents<ID>>
    @usableFromInline let failures: Failures
    @usableFromInline let passivated: Atomic<Int>
    @usableFromInline let recovered: Recoveries

    /// Creates a group keeping each entity's events in its stream, `stream(id)`.
    ///
    /// - Parameters:
    ///   - stream: the stream of an id (its description by default); distinct ids need distinct streams.
    ///   - program: every entity's program.
    ///   - router: how the program's effects are performed.
    ///   - store: where the events and snapshots go.
    ///   - events: how events are encoded.
    ///   - states: how snapshots are encoded.
    ///   - snapshotEvery: save an entity's snapshot after this many of its events (`nil`: never).
    ///   - passivation: when to release idle entities.
    ///   - failureGrace: how long effects of recorded events may finish after an entity's store fails.
    ///   - clock: the clock timeouts, grace periods and idleness are measured on.
    @inlinable
    public init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>,
        snapshotEvery: UInt64? = 1_000,
        passivation: Passivation = .never,
        failureGrace: Duration = .seconds(5),
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        let tickets = Tickets()
        let failures = Failures()
        self.failures = failures
        let recovered = Recoveries()
        self.recovered = recovered
        let storage = DurableStorage(
            store: store,
            events: events,
            states: states,
            initial: program.initial,
            update: program.update
        )
        let update = program.durableUpdate(snapshotEvery: snapshotEvery)
        let initial = program.initial
        self.tickets = tickets
        self.streamOf = stream
        self.passivation = passivation
        self.clock = clock
        self.residents = Locked(Residents<ID>())
        self.passivated = Atomic(0)
        core = LoopGroup(
            program: { id in
                let name = stream(id)
                return Program(
                    first: First(
                        state: DurableState(stream: name, initial: initial),
                        effects: [.recover(stream: name)]
                    ),
                    update: update
                )
            },
            effects: storage.router(
                for: router,
                tickets: tickets,
                failureGrace: failureGrace,
                recovered: recovered.count,
                failed: failures.record
            ),
            clock: clock
        )
    }

    /// Sends `event` to the entity `id`, recovering it first if it is not live. Never waits.
    @inlinable
    @discardableResult
    public func send(_ event: Event, to id: ID) -> Delivery {
        deliver(.event(event, ticket: nil), to: id)
    }

    /// Sends `event` to the entity `id` and returns once it is durable, with its version in the entity's
    /// stream. Throws as ``DurableLoop/sendDurably(_:)`` does.
    @inlinable
    public func sendDurably(_ event: Event, to id: ID) async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            let ticket = tickets.register(continuation)
            if case .rejected(let rejection) = deliver(.event(event, ticket: ticket), to: id) {
                tickets.refuse([ticket], with: DurableLoopError.rejected(rejection))
            }
        }
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
        var delivery = core.send(input, to: id)
        // A loop passivated after this sender found it refuses; looking again starts a new one.
        var attempts = 0
        while case .rejected(let rejection) = delivery, rejection == .stopping || rejection == .stopped,
            core.isRunning, attempts < 3
        {
            attempts += 1
            delivery = core.send(input, to: id)
        }
        if overflowing { passivateOldest() }
        return delivery
    }

    /// The state of a live entity, or `nil` for one that is not (never sent to, or passivated).
    public func state(of id: ID) -> State? {
        core.state(of: id)?.state
    }

    /// How many entities are live.
    public var count: Int {
        core.count
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
        recovered.value.load(ordering: .relaxed)
    }

    /// How many entities were passivated so far.
    public var passivations: Int {
        passivated.load(ordering: .relaxed)
    }

    /// The streams whose entities failed, with why. Such an entity refuses events until the process
    /// restarts.
    public var failedStreams: [String: String] {
        failures.reasons.withLock { $0 }
    }

    /// Runs the group until stopped or cancelled; passivates idle entities meanwhile.
    @discardableResult
    public func run() async throws -> LoopReport {
        let sweeper = passivation.idleAfter.map { interval in
            Task { [clock] in
                while !Task.isCancelled {
                    do { try await clock.sleep(for: interval) } catch { return }
                    self.sweep()
                }
            }
        }
        defer { sweeper?.cancel() }
        do {
            let report = try await core.run()
            tickets.refuseAll(with: DurableLoopError.ended)
            return report
        } catch {
            tickets.refuseAll(with: DurableLoopError.ended)
            throw error
        }
    }

    /// Stops the group gracefully (see ``/LoopRuntime/LoopGroup/stop(gracePeriod:)``).
    public func stop(gracePeriod: Duration = .seconds(30)) {
        core.stop(gracePeriod: gracePeriod)
        // Stopped before it ran: its queued events are dropped, so nobody may wait for them.
        if !core.isRunning { tickets.refuseAll(with: DurableLoopError.ended) }
    }

    /// Waits until ``run()`` has started.
    public func waitUntilRunning() async -> Bool {
        await core.waitUntilRunning()
    }

    /// Releases `id` if it is quiet; returns whether it did.
    @discardableResult
    public func passivate(_ id: ID) -> Bool {
        guard core.passivate(id, when: \.isQuiet) else { return false }
        residents.withLock { $0.forget(id) }
        passivated.add(1, ordering: .relaxed)
        return true
    }

    /// Releases quiet entities, oldest first, until the group is back within its cap; a busy one goes to
    /// the back of the line. Tries a few per call, so a send never pays for a long scan.
    @usableFromInline
    func passivateOldest() {
        guard let cap = passivation.maximumLive else { return }
        for _ in 0..<4 {
            guard let oldest = residents.withLock({ $0.count > cap ? $0.popOldest() : nil }) else { return }
            if !passivate(oldest) { keepOrForget(oldest) }
        }
    }

    /// Releases every quiet entity that received nothing since the sweep before the last.
    private func sweep() {
        let idle = residents.withLock { $0.advance() }
        for id in idle where !passivate(id) { keepOrForget(id) }
        passivateOldest()
    }

    /// A busy entity goes to the back of the line; one that is no longer live (it failed, or stopped
    /// itself) leaves it.
    private func keepOrForget(_ id: ID) {
        let live = core.state(of: id) != nil
        residents.withLock { residents in
            if live { residents.requeue(id) } else { residents.forget(id) }
        }
    }
}

/// Counts recoveries.
@usableFromInline
final class Recoveries: Sendable {
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
    @usableFromInline let reasons = Locked<[String: String]>([:])
    @usableFromInline let any = Atomic<Bool>(false)

    @usableFromInline
    init() {}

    @usableFromInline
    @Sendable func record(stream: String, reason: String) {
        reasons.withLock { $0[stream] = reason }
        any.store(true, ordering: .releasing)
    }
}

/// The live entities of a durable group, oldest first, with the sweep in which each last got an event.
@usableFromInline
struct Residents<ID: Hashable> {
    @usableFromInline var order: [ID] = []
    @usableFromInline var head = 0
    @usableFromInline var seen: [ID: UInt64] = [:]
    @usableFromInline var generation: UInt64 = 0

    @inlinable
    init() {}

    @inlinable
    var count: Int { seen.count }

    /// Notes an event for `id`.
    @inlinable
    mutating func touch(_ id: ID) {
        if seen.updateValue(generation, forKey: id) == nil { order.append(id) }
    }

    mutating func forget(_ id: ID) {
        seen.removeValue(forKey: id)
    }

    /// The oldest live id, taken off the line.
    mutating func popOldest() -> ID? {
        while head < order.count {
            let id = order[head]
            head += 1
            if head > 1_024 && head * 2 > order.count {
                order.removeFirst(head)
                head = 0
            }
            if seen[id] != nil { return id }
        }
        return nil
    }

    /// Puts a live id back at the end of the line.
    mutating func requeue(_ id: ID) {
        if seen[id] != nil { order.append(id) }
    }

    /// Starts a new sweep; returns the ids that got nothing during the whole previous one.
    mutating func advance() -> [ID] {
        generation += 1
        return seen.compactMap { id, last in last + 2 <= generation ? id : nil }
    }
}

extension DurableLoopGroup where Event: Codable, State: Codable {
    /// A durable group whose events and snapshots are in the compact binary form (``BinaryCodec``).
    @inlinable
    public convenience init(
        stream: @escaping @Sendable (ID) -> String = { "\($0)" },
        program: DurableProgram<State, Event, Effect>,
        effects router: EffectRouter<Effect, Event>,
        store: any EventStore,
        snapshotEvery: UInt64? = 1_000,
        passivation: Passivation = .never,
        failureGrace: Duration = .seconds(5),
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
            passivation: passivation,
            failureGrace: failureGrace,
            clock: clock
        )
    }
}
