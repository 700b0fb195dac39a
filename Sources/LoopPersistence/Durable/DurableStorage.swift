public import EffectHandlers
public import LoopCore
internal import LoopRuntime
public import Synchronization

/// The store's side of a durable loop: reading a stream back and appending to it, with the codecs.
/// Every failure comes back as a ``DurableInput/failed(_:)`` naming the stream (and the version, for an
/// event that does not decode), never as a thrown error the loop would have to map.
@usableFromInline
struct DurableStorage<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline let store: any EventStore
    @usableFromInline let events: any EventCodec<Event>
    @usableFromInline let states: any EventCodec<State>
    /// The program of the entity whose stream is being recovered.
    @usableFromInline let program: @Sendable (String) -> DurableProgram<State, Event, Effect>?
    @usableFromInline let keysKept: Int
    /// Its loop's or group's snapshots on the idle thread: a snapshot waiting there is replaced only by a
    /// newer one of the same stream of the same loop or group (other stores may have streams of the same
    /// name), and a stop hurries them (see ``hurrySnapshots()``).
    @usableFromInline let snapshots: IdleWork.Owner
    /// The clock timers' due times are recorded on.
    @usableFromInline let epoch: any EpochClock
    /// Where a group remembers its entities with work under way, if it does (see ``WorkMemory``).
    @usableFromInline let ledger: WorkLedger?

    @inlinable
    init(
        store: any EventStore,
        events: any EventCodec<Event>,
        states: any EventCodec<State>,
        keysKept: Int,
        clock: any Clock<Duration>,
        ledger: WorkLedger? = nil,
        program: @escaping @Sendable (String) -> DurableProgram<State, Event, Effect>?
    ) {
        self.ledger = ledger
        self.store = store
        self.events = events
        self.states = states
        self.keysKept = keysKept
        self.epoch = (clock as? any EpochClock) ?? SystemEpochClock()
        self.program = program
        self.snapshots = IdleWork.Owner()
    }

    /// Has this loop's or group's snapshots encoded at once, on the tasks that save them, from now on: a
    /// stop waits for them, and should not wait for an idle processor (see ``IdleWork``).
    @usableFromInline
    func hurrySnapshots() {
        IdleWork.shared.hurry(snapshots)
    }

    /// The latest snapshot, then every later event folded through the update, one page in memory; the
    /// callers' keys and the timers the snapshot and the records carry come back with the state.
    @inlinable
    func recover(_ stream: String) async -> DurableInput<State, Event> {
        guard let program = program(stream) else {
            return .failed(DurableFailure(.noProgram, stream: stream, whileRecovering: true))
        }
        var state = program.initial
        var version: UInt64 = 0
        var snapshotVersion: UInt64 = 0
        var keys = KeyWindow(capacity: keysKept)
        var timers: [TimerName: RecordedTimer] = [:]
        var revision: UInt32 = 1
        do {
            if let snapshot = try await store.latestSnapshot(of: stream) {
                do {
                    let stored = try RecordEnvelope.snapshot(snapshot.payload, capacity: keysKept)
                    state = try states.decode(stored.state)
                    if let recorded = stored.keys { keys = recorded }
                    for timer in stored.timers { timers[timer.name] = timer }
                    revision = stored.revision
                } catch {
                    return .failed(
                        DurableFailure(
                            .undecodable(.snapshot, version: snapshot.version, reason: "\(error)"),
                            stream: stream,
                            whileRecovering: true
                        )
                    )
                }
                version = snapshot.version
                snapshotVersion = snapshot.version
            }
            version = try await StoreFold.fold(
                stream,
                of: store,
                after: version,
                into: &state,
                revision: &revision,
                program: program,
                events: events
            ) { note, version, _ in
                guard let note else { return }
                keys.apply(note)
                if !note.timers.isEmpty { Self.apply(note.timers, at: version, in: &timers) }
            }
        } catch let undecodable as StoreFold.Undecodable {
            return .failed(
                DurableFailure(
                    .undecodable(.event, version: undecodable.version, reason: undecodable.reason),
                    stream: stream,
                    whileRecovering: true
                )
            )
        } catch let unknown as StoreFold.UnknownRevision {
            return .failed(
                DurableFailure(
                    .unknownRevision(unknown.revision, version: unknown.version, running: program.revision),
                    stream: stream,
                    whileRecovering: true
                )
            )
        } catch {
            return .failed(DurableFailure(storeError: error, stream: stream, whileRecovering: true))
        }
        return .recovered(
            state,
            version: version,
            snapshot: snapshotVersion,
            keys: keys.count > 0 ? keys : nil,
            timers: timers.values.sorted { $0.name < $1.name },
            now: epoch.sinceEpoch,
            marked: ledger?.isMarked(stream) ?? false,
            revision: revision
        )
    }

    /// Applies what the record at `version` says of timers to those waiting: the ones it started, due
    /// their delay after the record's time, then the ones it ended or saw start, then the held effects
    /// that started and opened an interval, due their delay after the record's time.
    @inlinable
    static func apply(_ note: TimerNote, at version: UInt64, in timers: inout [TimerName: RecordedTimer]) {
        for started in note.started {
            let name = TimerName(version: version, index: started.index)
            timers[name] = RecordedTimer(
                version: version,
                index: started.index,
                payload: (try? started.payload.get()) ?? [],
                delay: started.delay,
                due: note.recordedAt.map { $0 + started.delay },
                kind: started.kind
            )
        }
        for name in note.ended { timers[name] = nil }
        for name in note.fired { timers[name] = nil }
        for name in note.renewed {
            guard var timer = timers[name] else { continue }
            timer.kind = .window
            timer.due = note.recordedAt.map { $0 + timer.delay }
            timers[name] = timer
        }
    }

    /// Appends the events, each with its note: `.recorded`, or `.failed`.
    @inlinable
    func append(
        _ batch: [Event],
        notes: [Int: EventNote],
        to stream: String,
        expecting: UInt64,
        at time: Duration? = nil
    ) async -> DurableInput<State, Event> {
        let payloads: [[UInt8]]
        switch self.payloads(batch, notes: notes, of: stream, at: time) {
        case .success(let encoded): payloads = encoded
        case .failure(let failure): return failure.input
        }
        do {
            return .recorded(upTo: try await store.append(payloads, to: stream, expecting: expecting), at: time)
        } catch {
            return .failed(DurableFailure(storeError: error, stream: stream))
        }
    }

    /// The stored bytes of each event of `batch`, with its note, and of a note at position
    /// `batch.count` as a record of its own; timers started are stamped with `time`.
    @inlinable
    func payloads(
        _ batch: [Event],
        notes: [Int: EventNote],
        of stream: String,
        at time: Duration? = nil
    ) -> Result<[[UInt8]], EncodingFailure> {
        var payloads: [[UInt8]] = []
        payloads.reserveCapacity(batch.count + 1)
        func note(_ index: Int) throws -> EventNote? {
            guard var note = notes.isEmpty ? nil : notes[index] else { return nil }
            if note.timers.isTimed {
                for started in note.timers.started {
                    if case .failure(let error) = started.payload { throw CodecError("a timer's effect: \(error)") }
                }
                note.timers.recordedAt = time
            }
            return note
        }
        do {
            for (index, event) in batch.enumerated() {
                payloads.append(RecordEnvelope.event(try events.encode(event), note: try note(index)))
            }
            if let alone = try note(batch.count) { payloads.append(RecordEnvelope.event(nil, note: alone)) }
        } catch {
            return .failure(
                EncodingFailure(input: .failed(DurableFailure(.unencodable(reason: "\(error)"), stream: stream)))
            )
        }
        return .success(payloads)
    }

    /// The time to stamp an append with: now, if a note of it starts a timer or opens an interval.
    @inlinable
    func stamp(_ notes: [Int: EventNote]) -> Duration? {
        guard !notes.isEmpty, notes.values.contains(where: { $0.timers.isTimed }) else { return nil }
        return epoch.sinceEpoch
    }

    /// An event of a batch that does not encode: the input that stops the loop.
    @usableFromInline
    struct EncodingFailure: Error {
        @usableFromInline var input: DurableInput<State, Event>

        @inlinable
        init(input: DurableInput<State, Event>) {
            self.input = input
        }
    }

    /// What became of a snapshot to save.
    @usableFromInline
    enum Saved {
        /// It is in the store.
        case saved
        /// A newer snapshot of the stream, asked for before this one was encoded, replaced it.
        case superseded
        /// It could not be saved: the input that tells the loop why.
        case failed(DurableInput<State, Event>)
    }

    /// Saves `state` as the snapshot at `version`, with the callers' keys and the timers waiting.
    @inlinable
    func save(
        _ state: State,
        keys: KeyWindow?,
        timers: [RecordedTimer] = [],
        of stream: String,
        at version: UInt64
    ) async -> Saved {
        do {
            // Encoded where it takes no processor from events (see IdleWork), after they are acknowledged.
            let states = self.states
            // A newer snapshot of the stream asked for before this one was encoded replaces it.
            let encoded = await IdleWork.shared.run(owner: snapshots, key: stream) {
                Result { try states.encode(state) }
            }
            guard let encoded else { return .superseded }
            // The state the running program decided: its revision's.
            let payload = RecordEnvelope.snapshot(
                try encoded.get(),
                keys: keys,
                timers: timers,
                revision: program(stream)?.revision ?? 1
            )
            try await store.save(Snapshot(stream: stream, version: version, payload: payload))
            return .saved
        } catch {
            // The events are durable: the loop goes on, and tries again after the next interval.
            return .failed(
                .snapshotFailed("stream '\(stream)': cannot save the snapshot at version \(version): \(error)")
            )
        }
    }

    /// A digest of `event`'s encoding, compared between a keyed call and its repeats.
    @inlinable
    func fingerprint(of event: Event) throws -> UInt64 {
        LoopPersistence.fingerprint(try events.encode(event))
    }

    /// The call of `event` under `key`, without a ticket yet, for a sender that waits; `nil` without a key.
    ///
    /// - Throws: ``DurableLoopError/invalid(_:)`` if the key cannot be used or the event does not encode.
    @inlinable
    func durableCall(_ event: Event, key: String?) throws(DurableLoopError) -> DurableCall<Event>? {
        guard let key else { return nil }
        if let problem = KeyLimits.problem(with: key) { throw .invalid(problem) }
        do {
            return DurableCall(event: event, key: key, fingerprint: try fingerprint(of: event))
        } catch {
            throw .invalid("the event does not encode: \(error)")
        }
    }

    /// The program's routes, wrapped: the program's effects keep their routes and lifecycles, replies go
    /// to the callers waiting for them, the store's work runs in tasks, and senders and readers waiting
    /// for the store are answered through `tickets` and `readers`.
    @inlinable
    func router(
        for effects: EffectRouter<Effect, Event>,
        callers: Callers<State>,
        failureGrace: Duration,
        tally: StoreTally,
        failed: @escaping @Sendable (_ stream: String, _ reason: DurableFailure) -> Void = { _, _ in }
    ) -> EffectRouter<DurableEffect<State, Event, Effect>, DurableInput<State, Event>> {
        let storage = self
        let scope = effects.scope
        // An event a handler sends carries what the scope captures in the handler (what its wrap set),
        // kept with the event until its own effects run. The event an effect's error maps to carries the
        // effect's own context (it is made where the loop decides: nothing is captured there).
        let routed = effects.mapEvents(
            { DurableInput.event($0, ticket: nil, context: .captured(by: scope)) },
            errors: { DurableInput.event($0, ticket: nil) }
        )
        .pullback(
            { (effect: DurableEffect<State, Event, Effect>) in
                if case .effect(let inner, _, _, _) = effect { inner } else { nil }
            },
            key: { effect in if case .effect(_, let key, _, _) = effect { key } else { nil } },
            context: { effect in
                if case .effect(_, _, let context, _) = effect { .some(context.carried) } else { .none }
            },
            lifecycle: { effect in
                switch effect {
                case .effect(_, _, _, let lifecycle): lifecycle
                case .wait(_, let lifecycle): lifecycle
                default: nil
                }
            }
        )
        .mappingErrorEvents { effect, event in
            if case .effect(_, _, let context, _) = effect { event.carrying(context) } else { event }
        }
        .route(
            { if case .recover(let stream) = $0 { stream } else { nil } },
            to: ClosureEffectHandler { stream, send in await storage.recover(stream, send: send, tally: tally) }
        )
        .route(
            { effect -> Append? in
                guard
                    case .append(
                        let stream,
                        let events,
                        let expecting,
                        let snapshot,
                        let notes,
                        let keys,
                        let timers,
                        let marking
                    ) = effect
                else { return nil }
                return Append(
                    stream: stream,
                    events: events,
                    notes: notes,
                    expecting: expecting,
                    snapshot: snapshot,
                    keys: keys,
                    timers: timers,
                    marking: marking
                )
            },
            to: ClosureEffectHandler { append, send in await storage.perform(append, send: send, tally: tally) },
            completing: (store as? any AppendingWithCompletion).map { store in
                { append, send, done in storage.start(append, on: store, send: send, tally: tally, done: done) }
            }
        )
        .route(
            { if case .acknowledge(let acknowledgements) = $0 { acknowledgements } else { nil } },
            to: ClosureSyncEffectHandler { acknowledgements, _ in
                tally.ran()
                callers.senders.resolve(acknowledgements.map { ($0.ticket, $0.version) })
            }
        )
        .route(
            { effect -> (stream: String, delivery: ReplyDelivery, recorded: Bool)? in
                switch effect {
                case .reply(_, let stream, let delivery): (stream, delivery, false)
                case .answer(let stream, let delivery): (stream, delivery, true)
                default: nil
                }
            },
            to: ClosureSyncEffectHandler { reply, _ in
                // A reply is the program's effect; an answer from the record is the store's.
                if reply.recorded { tally.ran() }
                callers.requests.deliver(reply.delivery, in: reply.stream)
            }
        )
        .route(
            { effect -> (String, UInt64?, UInt64?, CallRefusal)? in
                if case .refuse(let stream, let ticket, let reply, let reason) = effect {
                    (stream, ticket, reply, reason)
                } else {
                    nil
                }
            },
            to: ClosureSyncEffectHandler { refusal, _ in
                tally.ran()
                tally.callsRefused.add(1, ordering: .relaxed)
                callers.refuse(refusal.1, reply: refusal.2, in: refusal.0, refusal.3)
            }
        )
        .route(
            { effect -> ([UInt64], State)? in
                if case .read(let tickets, let state) = effect { (tickets, state) } else { nil }
            },
            to: ClosureSyncEffectHandler { read, _ in
                tally.ran()
                callers.readers.resolve(read.0.map { ($0, read.1) })
            }
        )
        .route(
            { effect -> (stream: String, tickets: [UInt64], reason: DurableFailure)? in
                if case .fail(let stream, let tickets, let reason) = effect {
                    (stream, tickets, reason)
                } else {
                    nil
                }
            },
            to: ClosureSyncEffectHandler { failure, _ in
                tally.ran()
                failed(failure.stream, failure.reason)
                callers.fail(failure.tickets, in: failure.stream, reason: failure.reason)
            }
        )
        // Rare: after the routes every batch takes.
        .route(
            { if case .wait(let name, _) = $0 { name } else { nil } },
            to: ClosureEffectHandler { name, send in
                // The wait itself is the lifecycle's delay: once it starts, the timer is due.
                tally.ran()
                tally.sent(send(.timerDue(name)))
            }
        )
        .route(
            { if case .remember(let stream, let unfinished) = $0 { (stream, unfinished) } else { nil } },
            to: ClosureSyncEffectHandler { change, _ in
                tally.ran()
                storage.ledger?.change(change.0, unfinished: change.1)
            }
        )
        .stopLoop { if case .stop = $0 { failureGrace } else { nil } }
        // The loop captures nothing: each program event holds its own context.
        .scopeForWrapper { input in
            (input as? DurableInput<State, Event>)?.programEvent.map { ($0.event, $0.context.carried) }
        }
        // A stop an effect asks for (the program's own, or a failed store's) hurries the snapshots as
        // `stop()` does: the stop waits for them.
        return routed.whenStopAsked { storage.hurrySnapshots() }
    }

    /// Reads `stream` back and sends the loop what it found.
    @inlinable
    func recover(_ stream: String, send: Send<DurableInput<State, Event>>, tally: StoreTally) async {
        tally.tasksRun.add(1, ordering: .relaxed)
        defer { tally.tasksEnded.add(1, ordering: .relaxed) }
        let input = await recover(stream)
        if case .recovered = input {
            tally.recoveries.add(1, ordering: .relaxed)
        } else {
            tally.failures.add(1, ordering: .relaxed)
        }
        tally.sent(send(input))
    }

    /// Appends what `append` asks for and sends the loop the outcome; then saves its snapshot, if any.
    @inlinable
    func perform(_ append: Append, send: Send<DurableInput<State, Event>>, tally: StoreTally) async {
        tally.tasksRun.add(1, ordering: .relaxed)
        defer { tally.tasksEnded.add(1, ordering: .relaxed) }
        await performUncounted(append, send: send, tally: tally)
    }

    /// ``perform(_:send:tally:)``, its task counted by the caller. A batch that gives the stream work
    /// waits for the stream's mark first; one that ends it has the mark cleared once it is recorded.
    @inlinable
    func performUncounted(_ append: Append, send: Send<DurableInput<State, Event>>, tally: StoreTally) async {
        if append.marking == true, let ledger, !(await ledger.mark(append.stream)) {
            let failure = EventStoreError(
                .unavailable(reason: "the mark of its work could not be written to '\(ledger.stream)'"),
                stream: append.stream
            )
            _ = Self.acknowledge(
                append,
                .failed(DurableFailure(storeError: failure, stream: append.stream)),
                send: send,
                tally: tally
            )
            return
        }
        let time = stamp(append.notes)
        let outcome = await self.append(
            append.events,
            notes: append.notes,
            to: append.stream,
            expecting: append.expecting,
            at: time
        )
        if case .recorded = outcome, append.marking == false { ledger?.change(append.stream, unfinished: false) }
        guard case .recorded(let version, _) = Self.acknowledge(append, outcome, send: send, tally: tally),
            let snapshot = append.snapshot
        else { return }
        await save(snapshot, of: append, at: version, written: time, send: send, tally: tally)
    }

    /// ``perform(_:send:tally:)`` without a task waiting for the store: the events are encoded here, the
    /// store's writer sends the loop the outcome, and `done` ends the effect (after the snapshot, if any,
    /// is saved, in a task of its own then).
    @inlinable
    func start(
        _ append: Append,
        on store: any AppendingWithCompletion,
        send: Send<DurableInput<State, Event>>,
        tally: StoreTally,
        done: @escaping EffectRouter<DurableEffect<State, Event, Effect>, DurableInput<State, Event>>.Completion
    ) {
        tally.tasksRun.add(1, ordering: .relaxed)
        let ended: @Sendable () -> Void = {
            tally.tasksEnded.add(1, ordering: .relaxed)
            done(.success(()))
        }
        // A batch that waits for its stream's mark waits in a task.
        if append.marking == true, ledger != nil {
            Task {
                await performUncounted(append, send: send, tally: tally)
                ended()
            }
            return
        }
        let payloads: [[UInt8]]
        let time = stamp(append.notes)
        switch self.payloads(append.events, notes: append.notes, of: append.stream, at: time) {
        case .success(let encoded):
            payloads = encoded
        case .failure(let failure):
            _ = Self.acknowledge(append, failure.input, send: send, tally: tally)
            return ended()
        }
        // The completion captures the storage only when it has a snapshot to save: a copy of the whole
        // storage (each of its references retained) in every append's completion was measurable in w13.
        let saving: (@Sendable (UInt64) -> Void)?
        if let snapshot = append.snapshot {
            saving = { version in
                Task {
                    await save(snapshot, of: append, at: version, written: time, send: send, tally: tally)
                    ended()
                }
            }
        } else {
            saving = nil
        }
        let ledger = self.ledger
        store.append(payloads, to: append.stream, expecting: append.expecting) { result in
            let outcome: DurableInput<State, Event> =
                switch result {
                case .success(let version): .recorded(upTo: version, at: time)
                case .failure(let error): .failed(DurableFailure(storeError: error, stream: append.stream))
                }
            if case .recorded = outcome, append.marking == false { ledger?.change(append.stream, unfinished: false) }
            guard case .recorded(let version, _) = Self.acknowledge(append, outcome, send: send, tally: tally),
                let saving
            else { return ended() }
            saving(version)
        }
    }

    /// Counts the append's outcome and sends it to the loop: acknowledged first, so a snapshot is saved
    /// after, while the next batch is under way. Returns `outcome`.
    @inlinable
    static func acknowledge(
        _ append: Append,
        _ outcome: DurableInput<State, Event>,
        send: Send<DurableInput<State, Event>>,
        tally: StoreTally
    ) -> DurableInput<State, Event> {
        if case .recorded = outcome {
            tally.appends.add(1, ordering: .relaxed)
            tally.eventsAppended.add(append.events.count, ordering: .relaxed)
        } else {
            tally.failures.add(1, ordering: .relaxed)
        }
        tally.sent(send(outcome))
        return outcome
    }

    /// Saves the snapshot an append carries, recorded at `version` at the time `written` (the due time of
    /// the timers the append started), and counts what became of it.
    @inlinable
    func save(
        _ snapshot: State,
        of append: Append,
        at version: UInt64,
        written: Duration?,
        send: Send<DurableInput<State, Event>>,
        tally: StoreTally
    ) async {
        let timers = (append.timers ?? []).map { timer in
            var timer = timer
            if timer.due == nil { timer.due = written.map { $0 + timer.delay } }
            return timer
        }
        switch await save(snapshot, keys: append.keys, timers: timers, of: append.stream, at: version) {
        case .saved:
            tally.snapshotsSaved.add(1, ordering: .relaxed)
        case .superseded:
            break
        case .failed(let failure):
            tally.snapshotsFailed.add(1, ordering: .relaxed)
            tally.sent(send(failure))
        }
    }

    /// What an `.append` asks for.
    @usableFromInline
    struct Append: Sendable {
        @usableFromInline var stream: String
        @usableFromInline var events: [Event]
        @usableFromInline var notes: [Int: EventNote]
        @usableFromInline var expecting: UInt64
        @usableFromInline var snapshot: State?
        @usableFromInline var keys: KeyWindow?
        @usableFromInline var timers: [RecordedTimer]?
        @usableFromInline var marking: Bool?

        @inlinable
        init(
            stream: String,
            events: [Event],
            notes: [Int: EventNote],
            expecting: UInt64,
            snapshot: State?,
            keys: KeyWindow?,
            timers: [RecordedTimer]?,
            marking: Bool? = nil
        ) {
            self.marking = marking
            self.stream = stream
            self.events = events
            self.notes = notes
            self.expecting = expecting
            self.snapshot = snapshot
            self.keys = keys
            self.timers = timers
        }
    }
}

/// The ticket numbers of every durable loop's waiting callers, unique within the process, so one
/// `.fail` can name senders, readers and requesters together.
@usableFromInline
let ticketNumbers = Atomic<UInt64>(0)

/// Callers waiting for something a loop will answer once: each by ticket, with a continuation.
@usableFromInline
final class Tickets<Value: Sendable>: Sendable {
    private let waiting = Locked<[UInt64: CheckedContinuation<Value, any Error>]>([:])

    @usableFromInline
    init() {}

    /// Registers `continuation`; returns its ticket.
    @usableFromInline
    func register(_ continuation: CheckedContinuation<Value, any Error>) -> UInt64 {
        let ticket = ticketNumbers.add(1, ordering: .relaxed).newValue
        waiting.withLock { $0[ticket] = continuation }
        return ticket
    }

    /// Answers each ticket with its value.
    @usableFromInline
    func resolve(_ answers: [(UInt64, Value)]) {
        let resumed = waiting.withLock { waiting in
            answers.compactMap { ticket, value in waiting.removeValue(forKey: ticket).map { ($0, value) } }
        }
        for (continuation, value) in resumed { continuation.resume(returning: value) }
    }

    @usableFromInline
    func refuse(_ tickets: [UInt64], with error: any Error) {
        let refused = waiting.withLock { waiting in tickets.compactMap { waiting.removeValue(forKey: $0) } }
        for continuation in refused { continuation.resume(throwing: error) }
    }

    /// Fails every caller still waiting: the loop has ended.
    @usableFromInline
    func refuseAll(with error: any Error) {
        let refused = waiting.withLock { waiting in
            defer { waiting = [:] }
            return Array(waiting.values)
        }
        for continuation in refused { continuation.resume(throwing: error) }
    }
}

/// Everyone waiting for a durable loop or group: senders for durability, readers for the state,
/// requesters for replies.
@usableFromInline
final class Callers<State: Sendable>: Sendable {
    @usableFromInline let senders = Tickets<UInt64>()
    @usableFromInline let readers = Tickets<State>()
    @usableFromInline let requests: Requesters

    /// Callers whose requests' deadlines are measured on `clock`.
    @usableFromInline
    init(clock: any Clock<Duration>) {
        requests = Requesters(clock: clock)
    }

    @usableFromInline
    func refuse(_ ticket: UInt64?, reply: UInt64?, in stream: String, _ reason: CallRefusal) {
        let error: DurableLoopError =
            switch reason {
            case .keyReused(let key): .keyReused(key)
            case .noReplies: .invalid(reason.description)
            }
        if let ticket { senders.refuse([ticket], with: error) }
        if let ticket, let reply {
            let refusal: RequestError =
                switch reason {
                case .keyReused(let key): .keyReused(key)
                case .noReplies: .invalid(reason.description)
                }
            requests.refuse(ticket, reply: reply, in: stream, with: refusal)
        }
    }

    @usableFromInline
    func fail(_ tickets: [UInt64], in stream: String, reason: DurableFailure) {
        senders.refuse(tickets, with: DurableLoopError.storeFailed(reason))
        readers.refuse(tickets, with: DurableLoopError.storeFailed(reason))
        requests.fail(stream, with: .storeFailed(reason.description))
    }

    /// Sends `event` (as `call`, when it has a key) with a new sender's ticket through `deliver`, and
    /// returns its version once durable; a rejection is thrown as `refusal` makes it. The one way a durable
    /// loop and a group wait for durability.
    @inlinable
    func sendDurably<Event>(
        _ event: Event,
        as call: DurableCall<Event>?,
        deliver: (DurableInput<State, Event>) -> Delivery,
        refusal: (Rejection) -> DurableLoopError
    ) async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            let ticket = senders.register(continuation)
            var input = DurableInput<State, Event>.event(event, ticket: ticket)
            if var call {
                call.ticket = ticket
                input = .call(call)
            }
            if case .rejected(let rejection) = deliver(input) { senders.refuse([ticket], with: refusal(rejection)) }
        }
    }

    /// The loop ended: nobody gets an answer any more.
    @usableFromInline
    func end() {
        senders.refuseAll(with: DurableLoopError.ended)
        readers.refuseAll(with: DurableLoopError.ended)
        requests.failAll(with: .loopStopped)
    }
}

/// Why a durable loop could not make an event durable, or stopped.
public enum DurableLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The store failed (or the stream could not be read back); the loop stopped. The failure names the
    /// stream, and the version of a record that did not decode.
    case storeFailed(DurableFailure)
    /// The loop refused the event (it was stopping or stopped, or its inbox was full).
    case rejected(Rejection)
    /// The loop ended before the event was durable; it may or may not have been recorded.
    case ended
    /// The key was recorded before, for this stream, with a different event: nothing was applied.
    case keyReused(String)
    /// The call cannot be made as asked (a key too long, an event that does not encode), in words.
    case invalid(String)

    /// A sentence saying what happened.
    public var description: String {
        switch self {
        case .storeFailed(let reason): "the durable loop stopped: \(reason)"
        case .rejected(let rejection): "the event was rejected: \(rejection)"
        case .ended: "the loop ended before the event was durable"
        case .keyReused(let key): "the key '\(key.prefix(100))' was recorded before with a different event"
        case .invalid(let reason): "the call is invalid: \(reason)"
        }
    }
}
