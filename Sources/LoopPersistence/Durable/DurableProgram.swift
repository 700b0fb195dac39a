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
    /// How the program's answers to requests are found among its effects (see ``replying(_:)``);
    /// `nil` for a program that answers no requests.
    public var replies: ReplyRecording<Effect>?
    /// How the program's effects that wait are kept across restarts (see ``keepingTimers(codec:)``);
    /// `nil`: they wait in memory only, and a restart forgets them.
    public var timers: TimerRecording<Effect>?
    /// Which release of the program this is: recorded with the events it decides, so that a later
    /// release replays them through the update that decided them, never re-deciding the past (see
    /// ``replaying(revision:with:)``). Events recorded before revisions existed are revision 1.
    public var revision: UInt32
    /// The updates of earlier revisions this program still replays, by revision.
    public var earlierUpdates: [UInt32: Update<State, Event, Effect>]

    /// Creates a durable program; `revision` names this release of it (see ``revision``).
    public init(
        initial: State,
        update: Update<State, Event, Effect>,
        resume: @escaping @Sendable (State) -> [Effect] = { _ in [] },
        replies: ReplyRecording<Effect>? = nil,
        timers: TimerRecording<Effect>? = nil,
        revision: UInt32 = 1
    ) {
        self.initial = initial
        self.update = update
        self.resume = resume
        self.replies = replies
        self.timers = timers
        self.revision = revision
        self.earlierUpdates = [:]
    }

    /// The program, replaying the events that revision `revision` recorded through `update`, the update
    /// that revision ran: a new release changes what it decides from now on, and recovers the state the
    /// earlier one acknowledged.
    ///
    /// A stream whose history past its latest snapshot holds events of a revision the program does not
    /// replay fails to recover with ``DurableFailure/Kind/unknownRevision(_:version:running:)``, and
    /// nothing of it changes: the program never re-decides an event with another revision's update.
    public func replaying(revision: UInt32, with update: Update<State, Event, Effect>) -> DurableProgram {
        var program = self
        program.earlierUpdates[revision] = update
        return program
    }

    /// The update that decided the events of `revision`: this one's, or an earlier one it replays; `nil`
    /// when it replays none of that revision.
    @inlinable
    public func update(ofRevision revision: UInt32) -> Update<State, Event, Effect>? {
        revision == self.revision ? update : earlierUpdates[revision]
    }

    /// The program, answering requests with the replies `extract` finds among its effects, whose values
    /// are recorded in ``BinaryCodec``'s form.
    ///
    /// ```swift
    /// enum Effect { case answer(Reply<Outcome>), notify(Account) }
    /// let program = DurableProgram(initial: Account(), update: Update(Account.update))
    ///     .replying { if case .answer(let reply) = $0 { reply } else { nil } }
    /// let outcome = try await accounts.request(to: id, key: requestID) { .withdraw(50, replyTo: $0) }
    /// ```
    ///
    /// The durable loop delivers these replies itself (the router needs no route for them), once the
    /// event that decided each is recorded; the answer to a keyed request is recorded with that event.
    public func replying<Value: Codable & Sendable>(
        _ extract: @escaping @Sendable (Effect) -> Reply<Value>?
    ) -> DurableProgram {
        var program = self
        program.replies = ReplyRecording(extract, codec: BinaryCodec<Value>())
        return program
    }

    /// The program, answering requests with the replies `extract` finds among its effects, whose values
    /// are recorded with `codec`.
    public func replying<Value: Sendable>(
        _ extract: @escaping @Sendable (Effect) -> Reply<Value>?,
        codec: some EventCodec<Value>
    ) -> DurableProgram {
        var program = self
        program.replies = ReplyRecording(extract, codec: codec)
        return program
    }
}

/// What a durable loop processes: the program's events, what its callers ask, and what its store replies.
public enum DurableInput<State, Event> {
    /// An event of the program, from a sender or an effect handler; `ticket` identifies a sender waiting
    /// for it to be durable; `context` is what the router's ``/EffectHandlers/EffectScope`` captured
    /// where it was sent, handed to the scope around its effects (never recorded).
    case event(Event, ticket: UInt64?, context: EffectContext = .none)
    /// An event from a caller that gave a key, or asks for a reply: a key already recorded is not applied
    /// again (see ``KeyWindow``).
    indirect case call(DurableCall<Event>)
    /// A caller asks for the state as of the last recorded event, once every event applied before the
    /// read is recorded; `ticket` identifies it.
    case read(ticket: UInt64)
    /// The stream was read back: the state after its last record, that record's version, the version of
    /// the snapshot it started from (0 for none), the callers' keys recorded (`nil`: none), the timers
    /// still waiting, the time on the loop's ``EpochClock`` as it was read back, and whether the group
    /// had it marked as having work under way (see ``WorkMemory``), and the program revision that decided
    /// the last record (see ``DurableProgram/revision``).
    indirect case recovered(
        State,
        version: UInt64,
        snapshot: UInt64,
        keys: KeyWindow? = nil,
        timers: [RecordedTimer] = [],
        now: Duration = .zero,
        marked: Bool = false,
        revision: UInt32 = 1
    )
    /// The records up to `version` are durable, written at `at` on the loop's ``EpochClock`` (given when
    /// they started timers).
    case recorded(upTo: UInt64, at: Duration? = nil)
    /// A timer's wait is over: its effect starts (see ``DurableProgram/keepingTimers(codec:)``).
    case timerDue(TimerName)
    /// The store failed (or the stream could not be read back): why.
    case failed(DurableFailure)
    /// A snapshot could not be saved. Its events are durable, so the loop goes on; the next snapshot
    /// is tried after another `snapshotEvery` events.
    case snapshotFailed(String)
}

/// What a durable loop asks its runtime to do: the program's effects, once their event is durable, and
/// the store's work.
public enum DurableEffect<State, Event, Effect> {
    /// An effect of the program, performed by its route; its handler sees `key` as
    /// ``/EffectHandlers/IdempotencyKey/current``, and runs in the router's scope with `context`, its
    /// event's. A reply (see ``DurableProgram/replies``) is delivered to the callers waiting for its
    /// reply address. `lifecycle`, when given, replaces the effect's own (a timer's effect, once due,
    /// starts without waiting again).
    case effect(
        Effect,
        key: IdempotencyKey? = nil,
        context: EffectContext = .none,
        lifecycle: EffectLifecycle? = nil
    )
    /// Wait for a timer, with `lifecycle` (its effect's key and policy, and the time left), then tell
    /// the loop it is due (``DurableInput/timerDue(_:)``).
    case wait(TimerName, lifecycle: EffectLifecycle)
    /// Read the stream back: its latest snapshot, then every event after it folded through the update.
    case recover(stream: String)
    /// Append `events` to `stream`, which is at version `expecting`, each with its note (by position in
    /// `events`) if it has one, and a note at position `events.count` as a record of its own, with no
    /// event; then, if `snapshot` is set, save it as the state at the new version, with the callers' keys
    /// `keys` and the timers `timers`. The events are acknowledged before the snapshot is saved. With
    /// `marking`, the stream's work changes (see ``WorkMemory``): `true`, marked before the append;
    /// `false`, cleared after it.
    indirect case append(
        stream: String,
        events: [Event],
        expecting: UInt64,
        snapshot: State?,
        notes: [Int: EventNote] = [:],
        keys: KeyWindow? = nil,
        timers: [RecordedTimer]? = nil,
        marking: Bool? = nil
    )
    /// Mark `stream` as having work under way (`unfinished`), or clear its mark, without waiting (see
    /// ``WorkMemory``): a recovered entity whose mark is not what its state says.
    case remember(stream: String, unfinished: Bool)
    /// Tell waiting senders their events are durable: each ticket with its event's version.
    case acknowledge([Acknowledgement])
    /// A reply the update returned (the program's effect that holds it), for the callers waiting for its
    /// address in `stream`: released, as every effect, once its event is recorded.
    indirect case reply(Effect, stream: String, delivery: ReplyDelivery)
    /// The answer recorded for a key, for a repeat of the key whose request was answered.
    indirect case answer(stream: String, delivery: ReplyDelivery)
    /// Refuse a call, for the reason given: nothing of it was applied.
    indirect case refuse(stream: String, ticket: UInt64?, reply: UInt64?, reason: CallRefusal)
    /// Give the readers with these tickets the state as of the last recorded event.
    case read(tickets: [UInt64], state: State)
    /// The stream failed: tell waiting senders, readers and requesters their events will never be
    /// durable, and why.
    case fail(stream: String, tickets: [UInt64], reason: DurableFailure)
    /// Stop the loop: its store failed.
    case stop
}

/// Why a durable loop refused a call.
public enum CallRefusal: Hashable, Sendable, CustomStringConvertible {
    /// The key was recorded with a different event.
    case keyReused(String)
    /// A request to a program that answers none (its ``DurableProgram/replies`` is `nil`).
    case noReplies

    /// A sentence saying why.
    public var description: String {
        switch self {
        case .keyReused(let key): "the key '\(key.prefix(100))' was recorded with a different event"
        case .noReplies: "the program answers no requests: build it with DurableProgram.replying(_:)"
        }
    }
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
        case failed(DurableFailure)
    }

    /// An applied event whose effects wait for it to be durable.
    public struct Pending {
        /// The event's version.
        public var version: UInt64
        /// Its effects, performed once it is durable.
        public var effects: [Effect]
        /// The ticket of a sender waiting for it.
        public var ticket: UInt64?
        /// The context it was sent with, for the scope around its effects.
        public var context: EffectContext

        /// Creates a pending event.
        @inlinable
        public init(version: UInt64, effects: [Effect], ticket: UInt64?, context: EffectContext = .none) {
            self.version = version
            self.effects = effects
            self.ticket = ticket
            self.context = context
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
    /// What is recorded beside some of the unrecorded events, by position in ``unrecorded``.
    public var notes: [Int: EventNote] = [:]
    /// Applied events whose effects or senders wait for the store, in order.
    public var pending: [Pending] = []
    /// Calls that arrived while recovering, in order.
    public var held: [DurableCall<Event>] = []
    /// Events recorded since the last snapshot.
    public var sinceSnapshot: UInt64 = 0
    /// The program revision that runs, and the one that decided the last record: the next append records
    /// the running one's number when they differ.
    public var revision: (running: UInt32, recorded: UInt32) = (1, 1)
    /// Why the last snapshot could not be saved, if one could not.
    public var lastSnapshotFailure: String?
    /// The callers' keys recorded for this stream.
    public var keys: KeyWindow
    /// Senders of a repeated key waiting for the first try's event to be durable.
    public var repeats: [Acknowledgement] = []
    /// Readers waiting, each with the version applied when it asked.
    public var reads: [Acknowledgement] = []
    /// The state at the end of the batch under way, kept while readers wait for that batch.
    public var readable: (version: UInt64, state: State)?
    /// Repeats of a recorded key, answered from the record and not applied.
    public var repeated = 0
    /// Replies the update returned for a request that had its answer already: ignored.
    public var duplicateReplies = 0
    /// Replies dropped because their event will never be recorded (the store failed).
    public var droppedReplies = 0
    /// The timers waiting, in the order they were asked for (see ``DurableProgram/keepingTimers(codec:)``).
    public var timers: [DurableTimer<Effect>] = []
    /// The timers that started since the last record was handed to the store.
    public var fired: [TimerName] = []
    /// The held throttled effects that started, and opened their key's next interval, since the last
    /// record was handed to the store.
    public var renewed: [TimerName] = []
    /// Throttled effects dropped: asked for within their key's interval with `latest: false`, or
    /// replaced, while held, by a newer one.
    public var droppedEffects = 0
    /// Whether the entity is marked as having work under way, for a group that remembers work (see
    /// ``WorkMemory``); `nil` otherwise.
    public var unfinished: Bool?

    /// Whether nothing is on its way to the store: the loop may be passivated (and recovered later)
    /// without losing or repeating anything.
    @inlinable
    public var isQuiet: Bool {
        phase == .running && !appending && unrecorded.isEmpty && pending.isEmpty && held.isEmpty
            && repeats.isEmpty && reads.isEmpty && fired.isEmpty && renewed.isEmpty
    }

    /// A loop about to recover `stream`, starting from `initial` when the stream is new, keeping at most
    /// `keysKept` callers' keys.
    @inlinable
    public init(stream: String, initial: State, keysKept: Int = 1_000) {
        self.stream = stream
        self.state = initial
        self.keys = KeyWindow(capacity: keysKept)
    }
}

extension DurableProgram {
    /// The durable loop itself as a pure update: it applies each event to the program's state at once
    /// (so later events see it), hands the events to the store in batches (one append under way at a
    /// time; what arrives meanwhile goes in the next), and releases each event's effects only once the
    /// store says it is durable. A store failure stops it, and no effect of an unrecorded event runs.
    ///
    /// A call with a key the loop has recorded is not applied again: its sender gets the first try's
    /// version, its requester the recorded answer (see ``KeyWindow``). A reply the update returns is
    /// released with its event's other effects, after the event is recorded; a keyed request's answer is
    /// recorded with that event.
    ///
    /// `snapshotEvery` saves the state with the append that brings the events since the last snapshot to
    /// at least that many (`nil`: never).
    ///
    /// `remembering` marks the entity's stream while it has work under way (see ``WorkMemory``).
    @inlinable
    public func durableUpdate(
        snapshotEvery: UInt64?,
        remembering: Bool = false
    ) -> Update<DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>> {
        let (update, resume, replies, timers) = (self.update, self.resume, self.replies, self.timers)
        let revision = self.revision
        // Whether the state has work under way: something to resume, or a timer waiting.
        let work = remembering ? Self.work(resume) : nil
        return Update { (durable: inout DurableState<State, Event, Effect>, input: DurableInput<State, Event>) in
            switch input {
            case .event(let event, let ticket, let context):
                switch durable.phase {
                case .recovering:
                    durable.held.append(DurableCall(event: event, ticket: ticket, context: context))
                    return []
                case .failed(let reason):
                    return ticket.map { [.fail(stream: durable.stream, tickets: [$0], reason: reason)] } ?? []
                case .running:
                    durable.apply(
                        event,
                        ticket: ticket,
                        context: context,
                        note: nil,
                        update: update,
                        replies: replies,
                        timers: timers
                    )
                    return durable.handOver(snapshotEvery: snapshotEvery, timers: timers, work: work)
                }
            case .call(let call):
                switch durable.phase {
                case .recovering:
                    durable.held.append(call)
                    return []
                case .failed(let reason):
                    return [.fail(stream: durable.stream, tickets: call.ticket.map { [$0] } ?? [], reason: reason)]
                case .running:
                    var effects = durable.accept(call, update: update, replies: replies, timers: timers)
                    effects += durable.handOver(snapshotEvery: snapshotEvery, timers: timers, work: work)
                    return effects
                }
            case .read(let ticket):
                switch durable.phase {
                case .recovering:
                    // Marked with how many calls wait before it: it sees them, and none after.
                    durable.reads.append(Acknowledgement(ticket: ticket, version: UInt64(durable.held.count)))
                    return []
                case .failed(let reason):
                    return [.fail(stream: durable.stream, tickets: [ticket], reason: reason)]
                case .running:
                    durable.reads.append(Acknowledgement(ticket: ticket, version: durable.version))
                    if durable.appending && durable.unrecorded.isEmpty && durable.readable == nil {
                        durable.readable = (durable.version, durable.state)
                    }
                    return durable.releaseReads()
                }
            case .recovered(
                let state,
                let version,
                let snapshot,
                let keys,
                let recordedTimers,
                let now,
                let marked,
                let recordedRevision
            ):
                guard durable.phase == .recovering else { return [] }
                var waiting: [DurableTimer<Effect>] = []
                if let timers {
                    for recorded in recordedTimers {
                        do {
                            let effect = try timers.decode(recorded.payload)
                            let lifecycle = timers.lifecycle(effect)
                            waiting.append(
                                DurableTimer(
                                    version: recorded.version,
                                    index: recorded.index,
                                    effect: effect,
                                    payload: recorded.payload,
                                    delay: recorded.delay,
                                    lifecycle: lifecycle,
                                    due: recorded.due ?? now,
                                    kind: recorded.kind
                                )
                            )
                        } catch {
                            let reason = DurableFailure(
                                .undecodable(
                                    .event,
                                    version: recorded.version,
                                    reason: "the effect of its timer \(recorded.name) does not decode: \(error)"
                                ),
                                stream: durable.stream,
                                whileRecovering: true
                            )
                            return durable.fail(reason, replies: replies)
                        }
                    }
                }
                durable.phase = .running
                durable.revision = (running: revision, recorded: recordedRevision)
                durable.timers = waiting
                if work != nil { durable.unfinished = marked }
                durable.state = state
                durable.version = version
                durable.recorded = version
                if let keys { durable.keys = keys }
                // Events since the snapshot count toward the next one, across restarts and passivation.
                durable.sinceSnapshot = version - min(snapshot, version)
                let stream = durable.stream
                // A reply among them (to a request kept in the state) goes to whoever waits for it now,
                // unless its request has a recorded answer: that one stands.
                var effects: [DurableEffect<State, Event, Effect>] = []
                let resumed = resume(state)
                if let timers, !durable.timers.isEmpty {
                    // The recovered timers wait first, as they were let in before what resumes now; what
                    // resumes ends those of the keys it cancels or replaces, as it does their waits (the
                    // same at every recovery, so nothing of it is recorded).
                    for effect in resumed {
                        let lifecycle = timers.lifecycle(effect)
                        if lifecycle.policy == .cancel || lifecycle.policy == .latest, let key = lifecycle.key {
                            durable.timers.removeAll { $0.lifecycle.key == key && $0.kind != .window }
                        }
                    }
                    for timer in durable.timers {
                        let left = (timer.due ?? now) - now
                        switch timer.kind {
                        case .wait:
                            effects.append(
                                .wait(timer.name, lifecycle: TimerRecording<Effect>.wait(timer.lifecycle, left: left))
                            )
                        case .window:
                            effects.append(.wait(timer.name, lifecycle: TimerRecording<Effect>.window(left: left)))
                        case .held:
                            // It waits for its key's interval; with none (not recorded), it starts now.
                            let key = timer.lifecycle.key
                            if !durable.timers.contains(where: { $0.kind == .window && $0.lifecycle.key == key }) {
                                effects.append(.wait(timer.name, lifecycle: TimerRecording<Effect>.window(left: .zero)))
                            }
                        }
                    }
                }
                for (index, effect) in resumed.enumerated() {
                    if let found = replies?.find(effect) {
                        guard durable.keys.entry(replying: found.reply)?.answer == nil else {
                            durable.duplicateReplies += 1
                            continue
                        }
                        let delivery = ReplyDelivery(reply: found.reply, value: found.value)
                        effects.append(.reply(effect, stream: stream, delivery: delivery))
                    } else {
                        let key = IdempotencyKey(stream: stream, version: version, index: index, resumed: true)
                        // A throttled one restarts work that was under way: no interval holds it back, and
                        // it opens none (the durable loop decides throttles, so the engine must not).
                        var lifecycle: EffectLifecycle?
                        if let timers, case let own = timers.lifecycle(effect), own.policy == .throttle {
                            lifecycle = TimerRecording<Effect>.due(own)
                        }
                        effects.append(.effect(effect, key: key, lifecycle: lifecycle))
                    }
                }
                // Readers that asked while recovering wait for the calls held before them to be recorded.
                let (held, reads) = (durable.held, durable.reads)
                durable.held = []
                durable.reads = []
                var read = reads.startIndex
                for index in 0...held.count {
                    while read < reads.endIndex, reads[read].version == UInt64(index) {
                        durable.reads.append(Acknowledgement(ticket: reads[read].ticket, version: durable.version))
                        read += 1
                    }
                    // Those that asked before any held call are answered with the recovered state now.
                    effects += durable.releaseReads()
                    if index < held.count {
                        effects += durable.accept(held[index], update: update, replies: replies, timers: timers)
                    }
                }
                effects += durable.handOver(snapshotEvery: snapshotEvery, timers: timers, work: work)
                // A mark that is not what the recovered state says (an end recorded but not its clear, or
                // a stream recorded before work was remembered) is set right, without waiting.
                if let work, let was = durable.unfinished, case let now = work(durable), now != was {
                    durable.unfinished = now
                    effects.append(.remember(stream: durable.stream, unfinished: now))
                }
                return effects
            case .recorded(let version, let at):
                guard durable.phase == .running, version > durable.recorded else { return [] }
                durable.recorded = version
                durable.appending = false
                // The timers these records started are due from the time they were written.
                if let at, !durable.timers.isEmpty {
                    for index in durable.timers.indices
                    where durable.timers[index].due == nil && durable.timers[index].from <= version {
                        durable.timers[index].due = at + durable.timers[index].delay
                    }
                }
                var effects: [DurableEffect<State, Event, Effect>] = []
                var acknowledgements: [Acknowledgement] = []
                let released = durable.pending.prefix { $0.version <= version }
                for pending in released {
                    let (stream, version) = (durable.stream, pending.version)
                    for (index, effect) in pending.effects.enumerated() {
                        if let found = replies?.find(effect) {
                            effects.append(
                                .reply(
                                    effect,
                                    stream: stream,
                                    delivery: ReplyDelivery(reply: found.reply, value: found.value)
                                )
                            )
                            continue
                        }
                        // Asked once per effect: whether it is throttled, waits, or starts now.
                        let lifecycle = timers?.lifecycle(effect)
                        if let lifecycle, lifecycle.policy == .throttle, lifecycle.key != nil {
                            // It starts now if it opened its key's interval, which then waits; a held one
                            // waits for the interval under way, and a dropped one never starts.
                            let name = TimerName(version: version, index: index)
                            if durable.timers.contains(where: { $0.name == name && $0.kind == .window }) {
                                effects.append(
                                    .effect(
                                        effect,
                                        key: IdempotencyKey(stream: stream, version: version, index: index),
                                        context: pending.context,
                                        lifecycle: TimerRecording<Effect>.due(lifecycle)
                                    )
                                )
                                effects.append(
                                    .wait(
                                        name,
                                        lifecycle: TimerRecording<Effect>.window(left: lifecycle.interval ?? .zero)
                                    )
                                )
                            }
                        } else if let lifecycle, TimerRecording<Effect>.waits(lifecycle) {
                            // It waits as a timer, unless a later event ended it already.
                            let name = TimerName(version: version, index: index)
                            if durable.timers.contains(where: { $0.name == name }) {
                                effects.append(
                                    .wait(
                                        name,
                                        lifecycle: TimerRecording<Effect>.wait(
                                            lifecycle,
                                            left: lifecycle.delay ?? .zero
                                        )
                                    )
                                )
                            }
                        } else {
                            effects.append(
                                .effect(
                                    effect,
                                    key: IdempotencyKey(stream: stream, version: version, index: index),
                                    context: pending.context
                                )
                            )
                        }
                    }
                    if let ticket = pending.ticket {
                        acknowledgements.append(Acknowledgement(ticket: ticket, version: pending.version))
                    }
                }
                // All released (the usual case): the buffer goes too, or each quiet entity kept one (about 90
                // bytes, w9). The price is an allocation at the entity's next event, a small part of an
                // append's cost (w7 did not move).
                if released.count == durable.pending.count {
                    durable.pending = []
                } else {
                    durable.pending.removeFirst(released.count)
                }
                if !durable.repeats.isEmpty {
                    acknowledgements += durable.repeats.filter { $0.version <= version }
                    durable.repeats.removeAll { $0.version <= version }
                }
                if !acknowledgements.isEmpty { effects.append(.acknowledge(acknowledgements)) }
                if !durable.reads.isEmpty { effects += durable.releaseReads() }
                return effects + durable.handOver(snapshotEvery: snapshotEvery, timers: timers, work: work)
            case .timerDue(let name):
                // A timer a later event ended, or one of a failed loop, does not start.
                guard durable.phase == .running, let index = durable.timers.firstIndex(where: { $0.name == name })
                else { return [] }
                var effects: [DurableEffect<State, Event, Effect>]
                switch durable.timers[index].kind {
                case .wait:
                    let timer = durable.timers.remove(at: index)
                    durable.fired.append(name)
                    let key = IdempotencyKey(stream: durable.stream, version: name.version, index: name.index)
                    let lifecycle = TimerRecording<Effect>.due(timer.lifecycle)
                    effects = [.effect(timer.effect, key: key, context: timer.context, lifecycle: lifecycle)]
                case .window:
                    // The interval ends: the effect held for it starts and opens the next.
                    let window = durable.timers.remove(at: index)
                    durable.fired.append(name)
                    let held = durable.timers.firstIndex {
                        $0.kind == .held && $0.lifecycle.key == window.lifecycle.key
                    }
                    effects = held.map { durable.renew($0) } ?? []
                case .held:
                    effects = durable.renew(index)
                }
                return effects + durable.handOver(snapshotEvery: snapshotEvery, timers: timers, work: work)
            case .snapshotFailed(let reason):
                durable.lastSnapshotFailure = reason
                return []
            case .failed(let reason):
                return durable.fail(reason, replies: replies)
            }
        }
    }
}

extension DurableProgram {
    /// Whether a durable state has work under way: something its program resumes, or a timer waiting.
    @inlinable
    static func work(
        _ resume: @escaping @Sendable (State) -> [Effect]
    ) -> @Sendable (DurableState<State, Event, Effect>) -> Bool {
        { durable in !durable.timers.isEmpty || !resume(durable.state).isEmpty }
    }
}

extension DurableState {
    /// The store failed (or the stream could not be read back): nothing more is applied, and every
    /// caller waiting is told why.
    @inlinable
    mutating func fail(
        _ reason: DurableFailure,
        replies: ReplyRecording<Effect>?
    ) -> [DurableEffect<State, Event, Effect>] {
        if case .failed = phase { return [] }
        phase = .failed(reason)
        if let replies {
            droppedReplies += pending.reduce(0) { count, pending in
                count + pending.effects.count { replies.find($0) != nil }
            }
        }
        let tickets =
            pending.compactMap(\.ticket) + held.compactMap(\.ticket) + repeats.map(\.ticket) + reads.map(\.ticket)
        pending = []
        held = []
        repeats = []
        reads = []
        readable = nil
        unrecorded = []
        notes = [:]
        fired = []
        renewed = []
        appending = false
        return [.fail(stream: stream, tickets: tickets, reason: reason), .stop]
    }
}

extension DurableState {
    /// Applies `event` to the state; its effects wait until it is durable. A reply among them to a keyed
    /// request is recorded with the event; a second reply to one is dropped.
    @inlinable
    mutating func apply(
        _ event: Event,
        ticket: UInt64?,
        context: EffectContext = .none,
        note: consuming EventNote?,
        update: Update<State, Event, Effect>,
        replies: ReplyRecording<Effect>?,
        timers: TimerRecording<Effect>? = nil
    ) {
        var effects = update(&state, event)
        version += 1
        // Moved, not copied: a note is a dozen references.
        var note = (consume note) ?? EventNote()
        if let replies, !effects.isEmpty, keys.count > 0 {
            var index = 0
            while index < effects.count {
                if let found = replies.find(effects[index]) {
                    let version = self.version
                    switch keys.answer(
                        found.reply,
                        with: { RecordedAnswer(reply: found.reply, version: version, payload: found.encode()) }
                    ) {
                    case .recorded(let answer):
                        note.answers.append(answer)
                    case .answeredBefore:
                        effects.remove(at: index)
                        duplicateReplies += 1
                        continue
                    case .noKey:
                        break
                    }
                }
                index += 1
            }
        }
        // Timers are named by their position among the effects kept (a second reply is not one of them).
        if let timers, !effects.isEmpty {
            keep(effects, context: context, as: timers, replies: replies, in: &note.timers)
        }
        if !note.isEmpty { notes[unrecorded.count] = consume note }
        unrecorded.append(event)
        if !effects.isEmpty || ticket != nil {
            pending.append(Pending(version: version, effects: effects, ticket: ticket, context: context))
        }
    }

    /// Takes a call: applies it, unless its key is recorded; a repeat is answered from the record.
    @inlinable
    mutating func accept(
        _ call: DurableCall<Event>,
        update: Update<State, Event, Effect>,
        replies: ReplyRecording<Effect>?,
        timers: TimerRecording<Effect>? = nil
    ) -> [DurableEffect<State, Event, Effect>] {
        if call.reply != nil, replies == nil {
            return [.refuse(stream: stream, ticket: call.ticket, reply: call.reply, reason: .noReplies)]
        }
        // A request's ticket only identifies it for a refusal: its caller waits for the reply, not the version.
        let ticket = call.reply == nil ? call.ticket : nil
        guard let key = call.key else {
            apply(
                call.event,
                ticket: ticket,
                context: call.context,
                note: nil,
                update: update,
                replies: replies,
                timers: timers
            )
            return []
        }
        guard let entry = keys[key] else {
            let entry = KeyWindow.Entry(
                key: key,
                version: version + 1,
                fingerprint: call.fingerprint,
                reply: call.reply ?? 0
            )
            keys.insert(entry)
            apply(
                call.event,
                ticket: ticket,
                context: call.context,
                note: EventNote(key: entry),
                update: update,
                replies: replies,
                timers: timers
            )
            return []
        }
        guard entry.fingerprint == call.fingerprint else {
            return [.refuse(stream: stream, ticket: call.ticket, reply: call.reply, reason: .keyReused(key))]
        }
        repeated += 1
        var effects: [DurableEffect<State, Event, Effect>] = []
        if let ticket {
            let acknowledgement = Acknowledgement(ticket: ticket, version: entry.version)
            if entry.version <= recorded {
                effects.append(.acknowledge([acknowledgement]))
            } else {
                repeats.append(acknowledgement)
            }
        }
        // An answer not yet recorded reaches this caller with the first one's: it waits on the same address.
        if call.reply != nil, let answer = entry.answer, answer.version <= recorded, let replies {
            effects.append(
                .answer(
                    stream: stream,
                    delivery: ReplyDelivery(reply: entry.reply, recorded: answer.payload, decode: replies.decode)
                )
            )
        }
        return effects
    }

    /// Answers the readers whose events are all recorded, with the state as of the last recorded event.
    @inlinable
    mutating func releaseReads() -> [DurableEffect<State, Event, Effect>] {
        guard !reads.isEmpty else { return [] }
        if recorded == version {
            defer {
                reads = []
                readable = nil
            }
            return [.read(tickets: reads.map(\.ticket), state: state)]
        }
        guard let batch = readable, batch.version <= recorded else { return [] }
        readable = nil
        let answered = reads.filter { $0.version <= batch.version }
        reads.removeAll { $0.version <= batch.version }
        return answered.isEmpty ? [] : [.read(tickets: answered.map(\.ticket), state: batch.state)]
    }

    /// Keeps the effects of the event just applied (at ``version``) that wait as timers, noting them in
    /// `note`; and ends, noting them too, the timers of the keys the effects cancel or replace (a
    /// `cancel`, a `latest` or a newer debounce of the key), as the loop ends their waits once the
    /// event is recorded.
    @inlinable
    mutating func keep(
        _ effects: [Effect],
        context: EffectContext,
        as recording: TimerRecording<Effect>,
        replies: ReplyRecording<Effect>? = nil,
        in note: inout TimerNote
    ) {
        for (index, effect) in effects.enumerated() {
            // A reply is delivered once its event is recorded, whatever its lifecycle says.
            if let replies, replies.find(effect) != nil { continue }
            let lifecycle = recording.lifecycle(effect)
            if lifecycle.policy == .cancel || lifecycle.policy == .latest, let key = lifecycle.key, !timers.isEmpty {
                // An interval under way is not ended: it ends at its time, as the engine's does.
                let ending = timers.filter { $0.lifecycle.key == key && $0.kind != .window }
                if !ending.isEmpty {
                    note.ended += ending.map(\.name)
                    timers.removeAll { $0.lifecycle.key == key && $0.kind != .window }
                }
            }
            let kind: TimerKind
            let delay: Duration
            if lifecycle.policy == .throttle, let key = lifecycle.key {
                delay = lifecycle.interval ?? .zero
                if timers.contains(where: { $0.kind == .window && $0.lifecycle.key == key }) {
                    guard lifecycle.keepsLatest else {
                        droppedEffects += 1
                        continue
                    }
                    // A newer one replaces the one held.
                    if let replaced = timers.firstIndex(where: { $0.kind == .held && $0.lifecycle.key == key }) {
                        note.ended.append(timers.remove(at: replaced).name)
                        droppedEffects += 1
                    }
                    kind = .held
                } else {
                    kind = .window
                }
            } else if TimerRecording<Effect>.waits(lifecycle), let wait = lifecycle.delay {
                (kind, delay) = (.wait, wait)
            } else {
                continue
            }
            let payload = Result { () throws(CodecError) -> [UInt8] in
                do { return try recording.encode(effect) } catch { throw CodecError("\(error)") }
            }
            note.started.append(TimerNote.Started(index: index, delay: delay, payload: payload, kind: kind))
            timers.append(
                DurableTimer(
                    version: version,
                    index: index,
                    effect: effect,
                    payload: (try? payload.get()) ?? [],
                    delay: delay,
                    lifecycle: lifecycle,
                    context: context,
                    kind: kind
                )
            )
        }
    }

    /// The held throttled effect at `index` starts: it opens its key's next interval, which waits its
    /// delay from now, and is due, once recorded, its delay after the record that says so. (One whose
    /// event is not recorded yet is only turned into the interval: its release starts it.)
    @inlinable
    mutating func renew(_ index: Int) -> [DurableEffect<State, Event, Effect>] {
        timers[index].kind = .window
        timers[index].due = nil
        timers[index].from = .max
        let timer = timers[index]
        renewed.append(timer.name)
        // Its event is not recorded yet: it starts when it is, released with its event's other effects
        // as an effect that opened an interval is.
        guard timer.version <= recorded else { return [] }
        let key = IdempotencyKey(stream: stream, version: timer.version, index: timer.index)
        return [
            .effect(
                timer.effect,
                key: key,
                context: timer.context,
                lifecycle: TimerRecording<Effect>.due(timer.lifecycle)
            ),
            .wait(timer.name, lifecycle: TimerRecording<Effect>.window(left: timer.delay)),
        ]
    }

    /// Hands the unrecorded events to the store, unless an append is under way; with them (or in a record
    /// of their own, when there are none) the timers that started since the last record.
    @inlinable
    mutating func handOver(
        snapshotEvery: UInt64?,
        timers recording: TimerRecording<Effect>? = nil,
        work: (@Sendable (DurableState) -> Bool)? = nil
    ) -> [DurableEffect<State, Event, Effect>] {
        guard !appending, !unrecorded.isEmpty || !fired.isEmpty || !renewed.isEmpty else { return [] }
        appending = true
        let events = unrecorded
        var notes = self.notes
        unrecorded = []
        self.notes = [:]
        var records = events.count
        if !fired.isEmpty || !renewed.isEmpty {
            if events.isEmpty {
                // A record of its own, after the last one.
                version += 1
                records = 1
            }
            notes[max(events.count - 1, 0), default: EventNote()].timers.fired = fired
            if !renewed.isEmpty {
                notes[max(events.count - 1, 0), default: EventNote()].timers.renewed = renewed
                // Their intervals are due from this record's time.
                for index in timers.indices where renewed.contains(timers[index].name) { timers[index].from = version }
            }
            fired = []
            renewed = []
        }
        // The first record of a new revision says so; the records after it are that revision's too.
        if revision.recorded != revision.running {
            notes[0, default: EventNote()].revision = revision.running
            revision.recorded = revision.running
        }
        sinceSnapshot += UInt64(records)
        var snapshot: State?
        if let every = snapshotEvery, sinceSnapshot >= every {
            snapshot = state
            sinceSnapshot = 0
        }
        // Readers waiting for these events get the state at the batch's end once it is recorded.
        if !reads.isEmpty && readable == nil { readable = (version, state) }
        // The batch gives the entity work, or ends it: marked before the append, cleared after.
        var marking: Bool?
        if let work, let was = unfinished, case let now = work(self), now != was {
            unfinished = now
            marking = now
        }
        return [
            .append(
                stream: stream,
                events: events,
                expecting: version - UInt64(records),
                snapshot: snapshot,
                notes: notes,
                keys: snapshot != nil && keys.count > 0 ? keys : nil,
                timers: snapshot != nil && recording != nil ? timers.map(\.recorded) : nil,
                marking: marking
            )
        ]
    }
}

extension DurableProgram: Sendable where State: Sendable {}
extension DurableInput: Sendable where State: Sendable, Event: Sendable {}
extension DurableInput: Equatable where State: Equatable, Event: Equatable {}

extension DurableInput {
    /// The program's event and its context, if this is one (a plain one or a call).
    @inlinable
    var programEvent: (event: Event, context: EffectContext)? {
        switch self {
        case .event(let event, _, let context): (event, context)
        case .call(let call): (call.event, call.context)
        default: nil
        }
    }

    /// The same input, carrying what `scope` captures now if it is a program's event; the input as it is
    /// without a scope.
    @inlinable
    func carrying<Effect>(capturedBy scope: EffectScope<Effect>?) -> DurableInput {
        guard let scope else { return self }
        return carrying(EffectContext.captured(by: scope))
    }

    /// The same input, carrying `context` (evaluated only then) if it is a program's event (a plain one
    /// or a call).
    @inlinable
    func carrying(_ context: @autoclosure () -> EffectContext) -> DurableInput {
        switch self {
        case .event(let event, let ticket, _): return .event(event, ticket: ticket, context: context())
        case .call(var call):
            call.context = context()
            return .call(call)
        default: return self
        }
    }
}
extension DurableEffect: Sendable where State: Sendable, Event: Sendable, Effect: Sendable {}
extension DurableEffect: Equatable where State: Equatable, Event: Equatable, Effect: Equatable {}
extension DurableState.Pending: Sendable where Effect: Sendable {}
extension DurableState.Pending: Equatable where Effect: Equatable {}
extension DurableState: Sendable where State: Sendable, Event: Sendable, Effect: Sendable {}
