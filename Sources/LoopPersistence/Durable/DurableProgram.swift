public import EffectHandlers
public import LoopCore

/// The pure half of a durable loop: where it starts when its stream is new, how it handles events, and
/// what work it resumes whenever it starts, from nothing or from a recovered state.
///
/// ```swift
/// let program = DurableProgram(initial: Jobs(), update: Update(Jobs.update)) { jobs in
///     jobs.running.map { .start($0) }     // jobs that were running when the process died run again
/// }
/// #expect(program.resume(recovered) == [.start(job)])
/// ```
///
/// `resume` is to a durable loop what ``/LoopCore/First``'s effects are to a loop: the effects it performs
/// when it starts, but decided from the state it starts in, since that may be a recovered one. It is a
/// plain function of the state, so a test asserts it as a value.
public struct DurableProgram<State, Event, Effect> {
    /// The state of a stream with no events.
    public var initial: State
    /// The logic applied to every event, when it arrives and again when the stream is recovered.
    public var update: Update<State, Event, Effect>
    /// The effects to perform when the loop starts in a state: the start-up effects of a new stream, or
    /// the work a recovered one resumes. Effects of recovered events are never performed again; this is
    /// where a program says which of them still need doing.
    public var resume: @Sendable (State) -> [Effect]

    /// Creates a durable program.
    public init(
        initial: State,
        update: Update<State, Event, Effect>,
        resume: @escaping @Sendable (State) -> [Effect] = { _ in [] }
    ) {
        self.initial = initial
        self.update = update
        self.resume = resume
    }
}

/// What a durable loop processes: the program's events, and what its store reports.
public enum DurableInput<State, Event> {
    /// An event of the program, from a sender or an effect handler; `ticket` identifies a sender waiting
    /// for it to be durable.
    case event(Event, ticket: UInt64?)
    /// The stream was read back: the state after its last event, that event's version, and the
    /// version of the snapshot it started from (0 for none).
    case recovered(State, version: UInt64, snapshot: UInt64)
    /// The events up to `version` are durable.
    case recorded(upTo: UInt64)
    /// The store failed (or the stream could not be read back): why, in words naming the stream.
    case failed(String)
    /// A snapshot could not be saved. Its events are durable, so the loop goes on; the next snapshot
    /// is tried after another `snapshotEvery` events.
    case snapshotFailed(String)
}

/// What a durable loop asks its runtime to do: the program's effects, once their event is durable, and
/// the store's work.
public enum DurableEffect<State, Event, Effect> {
    /// An effect of the program, performed by its route; its handler sees `key` as
    /// ``/EffectHandlers/IdempotencyKey/current``.
    case effect(Effect, key: IdempotencyKey? = nil)
    /// Read the stream back: its latest snapshot, then every event after it folded through the update.
    case recover(stream: String)
    /// Append `events` to `stream`, which is at version `expecting`; then, if `snapshot` is set, save it
    /// as the state at the new version.
    case append(stream: String, events: [Event], expecting: UInt64, snapshot: State?)
    /// Tell waiting senders their events are durable: each ticket with its event's version.
    case acknowledge([Acknowledgement])
    /// The stream failed: tell waiting senders their events will never be durable, and why.
    case fail(stream: String, tickets: [UInt64], reason: String)
    /// Stop the loop: its store failed.
    case stop
}

/// A sender's ticket and the version its event was recorded at.
public struct Acknowledgement: Hashable, Sendable {
    /// The ticket the sender was given.
    public var ticket: UInt64
    /// The version of its event in the stream.
    public var version: UInt64

    /// Creates an acknowledgement.
    @inlinable
    public init(ticket: UInt64, version: UInt64) {
        self.ticket = ticket
        self.version = version
    }
}

/// The state of a durable loop: the program's state, and where its events are on the way to the store.
public struct DurableState<State, Event, Effect> {
    /// Where the loop is in its life.
    public enum Phase: Hashable, Sendable {
        /// Reading its stream back; events that arrive wait in ``DurableState/held``.
        case recovering
        /// Processing events.
        case running
        /// The store failed: no event is applied or acknowledged any more.
        case failed(String)
    }

    /// An applied event whose effects wait for it to be durable.
    public struct Pending {
        /// The event's version.
        public var version: UInt64
        /// Its effects, performed once it is durable.
        public var effects: [Effect]
        /// The ticket of a sender waiting for it.
        public var ticket: UInt64?

        /// Creates a pending event.
        @inlinable
        public init(version: UInt64, effects: [Effect], ticket: UInt64?) {
            self.version = version
            self.effects = effects
            self.ticket = ticket
        }
    }

    /// The stream the loop's events are kept in.
    public var stream: String
    /// Where the loop is in its life.
    public var phase: Phase = .recovering
    /// The program's state, after every applied event.
    public var state: State
    /// The version of the last applied event.
    public var version: UInt64 = 0
    /// The version of the last durable event.
    public var recorded: UInt64 = 0
    /// Whether an append is under way.
    public var appending = false
    /// Applied events not yet handed to the store, in order.
    public var unrecorded: [Event] = []
    /// Applied events whose effects or senders wait for the store, in order.
    public var pending: [Pending] = []
    /// Events that arrived while recovering, in order.
    public var held: [(event: Event, ticket: UInt64?)] = []
    /// Events recorded since the last snapshot.
    public var sinceSnapshot: UInt64 = 0
    /// Why the last snapshot could not be saved, if one could not.
    public var lastSnapshotFailure: String?

    /// Whether nothing is on its way to the store: the loop may be passivated (and recovered later)
    /// without losing or repeating anything.
    @inlinable
    public var isQuiet: Bool {
        phase == .running && !appending && unrecorded.isEmpty && pending.isEmpty && held.isEmpty
    }

    /// A loop about to recover `stream`, starting from `initial` when the stream is new.
    @inlinable
    public init(stream: String, initial: State) {
        self.stream = stream
        self.state = initial
    }
}

extension DurableProgram {
    /// The durable loop itself as a pure update: it applies each event to the program's state at once
    /// (so later events see it), hands the events to the store in batches (one append under way at a
    /// time; what arrives meanwhile goes in the next), and releases each event's effects only once the
    /// store says it is durable. A store failure stops it, and no effect of an unrecorded event runs.
    ///
    /// `snapshotEvery` saves the state with the append that brings the events since the last snapshot to
    /// at least that many (`nil`: never).
    @inlinable
    public func durableUpdate(
        snapshotEvery: UInt64?
    ) -> Update<DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>> {
        let (update, resume) = (self.update, self.resume)
        return Update { (durable: inout DurableState<State, Event, Effect>, input: DurableInput<State, Event>) in
            switch input {
            case .event(let event, let ticket):
                switch durable.phase {
                case .recovering:
                    durable.held.append((event, ticket))
                    return []
                case .failed(let reason):
                    return ticket.map { [.fail(stream: durable.stream, tickets: [$0], reason: reason)] } ?? []
                case .running:
                    durable.apply(event, ticket: ticket, update: update)
                    return durable.handOver(snapshotEvery: snapshotEvery)
                }
            case .recovered(let state, let version, let snapshot):
                guard durable.phase == .recovering else { return [] }
                durable.phase = .running
                durable.state = state
                durable.version = version
                durable.recorded = version
                // Events since the snapshot count toward the next one, across restarts and passivation.
                durable.sinceSnapshot = version - min(snapshot, version)
                let stream = durable.stream
                var effects = resume(state).enumerated().map { index, effect in
                    DurableEffect<State, Event, Effect>.effect(
                        effect,
                        key: IdempotencyKey(stream: stream, version: version, index: index, resumed: true)
                    )
                }
                let held = durable.held
                durable.held = []
                for (event, ticket) in held { durable.apply(event, ticket: ticket, update: update) }
                effects += durable.handOver(snapshotEvery: snapshotEvery)
                return effects
            case .recorded(let version):
                guard durable.phase == .running, version > durable.recorded else { return [] }
                durable.recorded = version
                durable.appending = false
                var effects: [DurableEffect<State, Event, Effect>] = []
                var acknowledgements: [Acknowledgement] = []
                let released = durable.pending.prefix { $0.version <= version }
                for pending in released {
                    let (stream, version) = (durable.stream, pending.version)
                    effects += pending.effects.enumerated().map { index, effect in
                        DurableEffect<State, Event, Effect>.effect(
                            effect,
                            key: IdempotencyKey(stream: stream, version: version, index: index)
                        )
                    }
                    if let ticket = pending.ticket {
                        acknowledgements.append(Acknowledgement(ticket: ticket, version: pending.version))
                    }
                }
                durable.pending.removeFirst(released.count)
                if !acknowledgements.isEmpty { effects.append(.acknowledge(acknowledgements)) }
                return effects + durable.handOver(snapshotEvery: snapshotEvery)
            case .snapshotFailed(let reason):
                durable.lastSnapshotFailure = reason
                return []
            case .failed(let reason):
                if case .failed = durable.phase { return [] }
                durable.phase = .failed(reason)
                let tickets = durable.pending.compactMap(\.ticket) + durable.held.compactMap(\.ticket)
                durable.pending = []
                durable.held = []
                durable.unrecorded = []
                durable.appending = false
                return [.fail(stream: durable.stream, tickets: tickets, reason: reason), .stop]
            }
        }
    }
}

extension DurableState {
    /// Applies `event` to the state; its effects wait until it is durable.
    @inlinable
    mutating func apply(_ event: Event, ticket: UInt64?, update: Update<State, Event, Effect>) {
        let effects = update(&state, event)
        version += 1
        unrecorded.append(event)
        if !effects.isEmpty || ticket != nil {
            pending.append(Pending(version: version, effects: effects, ticket: ticket))
        }
    }

    /// Hands the unrecorded events to the store, unless an append is under way.
    @inlinable
    mutating func handOver(snapshotEvery: UInt64?) -> [DurableEffect<State, Event, Effect>] {
        guard !appending, !unrecorded.isEmpty else { return [] }
        appending = true
        let events = unrecorded
        unrecorded = []
        sinceSnapshot += UInt64(events.count)
        var snapshot: State?
        if let every = snapshotEvery, sinceSnapshot >= every {
            snapshot = state
            sinceSnapshot = 0
        }
        return [.append(stream: stream, events: events, expecting: version - UInt64(events.count), snapshot: snapshot)]
    }
}

extension DurableProgram: Sendable where State: Sendable {}
extension DurableInput: Sendable where State: Sendable, Event: Sendable {}
extension DurableInput: Equatable where State: Equatable, Event: Equatable {}
extension DurableEffect: Sendable where State: Sendable, Event: Sendable, Effect: Sendable {}
extension DurableEffect: Equatable where State: Equatable, Event: Equatable, Effect: Equatable {}
extension DurableState.Pending: Sendable where Effect: Sendable {}
extension DurableState.Pending: Equatable where Effect: Equatable {}
extension DurableState: Sendable where State: Sendable, Event: Sendable, Effect: Sendable {}
