public import LoopCore
public import LoopRuntime
public import Synchronization

/// What a durable loop or group did for its store, counted apart from the program's own events and
/// effects (which its ``/LoopRuntime/LoopReport`` counts).
///
/// A durable loop runs on a plain loop whose inputs include the store's replies (an append was recorded,
/// a stream was read back) and whose effects include the store's tasks (append, recover, acknowledge).
/// Its report leaves those out, so `eventsProcessed` is the number of events the program's update saw,
/// and they are counted here instead.
public struct StoreWork: Hashable, Sendable, CustomStringConvertible {
    /// Streams read back: each start of a loop or an entity, after passivation too.
    public var recoveries = 0
    /// Appends the store took; each is one write of a batch of events.
    public var appends = 0
    /// Events in those appends.
    public var eventsAppended = 0
    /// Appends and recoveries that failed. Each one stops its stream.
    public var failures = 0
    /// Snapshots saved.
    public var snapshotsSaved = 0
    /// Snapshots that could not be saved (their events are durable; the next one is tried later).
    public var snapshotsFailed = 0
    /// Keyed calls whose key was recorded: not applied again, answered from the record.
    public var callsRepeated = 0
    /// Calls refused: a key recorded with another event, or a request to a program that answers none.
    public var callsRefused = 0
    /// The store's replies and the callers' durable reads that the underlying loop processed.
    public var inputsProcessed = 0
    /// The store's tasks that the underlying loop ran: recoveries, appends, acknowledgements, durable
    /// reads, recorded answers, refusals and failures.
    public var tasksRun = 0

    /// Nothing done yet.
    public init() {}

    /// One line with the main counts.
    public var description: String {
        "store: \(recoveries) recoveries, \(appends) appends of \(eventsAppended) events, \(failures) failed; "
            + "snapshots: \(snapshotsSaved) saved, \(snapshotsFailed) failed; "
            + "calls: \(callsRepeated) repeated, \(callsRefused) refused"
    }
}

/// The counts behind ``StoreWork``, and what the underlying loop counted for the store, to take out of its
/// report. Shared by the loop's routes and its update (relaxed atomics: counts, read after the fact).
@usableFromInline
final class StoreTally: Sendable {
    @usableFromInline let recoveries = Atomic<Int>(0)
    @usableFromInline let appends = Atomic<Int>(0)
    @usableFromInline let eventsAppended = Atomic<Int>(0)
    @usableFromInline let failures = Atomic<Int>(0)
    @usableFromInline let snapshotsSaved = Atomic<Int>(0)
    @usableFromInline let snapshotsFailed = Atomic<Int>(0)
    @usableFromInline let callsRepeated = Atomic<Int>(0)
    @usableFromInline let callsRefused = Atomic<Int>(0)
    /// The store's inputs sent to the loop, those it refused, and those it processed.
    @usableFromInline let inputsSent = Atomic<Int>(0)
    @usableFromInline let inputsRejected = Atomic<Int>(0)
    @usableFromInline let inputsProcessed = Atomic<Int>(0)
    /// The store's tasks begun, and those that ended (a synchronous one ends as it begins).
    @usableFromInline let tasksRun = Atomic<Int>(0)
    @usableFromInline let tasksEnded = Atomic<Int>(0)

    @usableFromInline
    init() {}

    /// The store's input `input` was offered to the loop, which answered `delivery`.
    @inlinable
    func sent(_ delivery: Delivery) {
        inputsSent.add(1, ordering: .relaxed)
        if case .rejected = delivery { inputsRejected.add(1, ordering: .relaxed) }
    }

    /// A synchronous task of the store ran (and so ended).
    @inlinable
    func ran() {
        tasksRun.add(1, ordering: .relaxed)
        tasksEnded.add(1, ordering: .relaxed)
    }

    /// `update`, counting the store's inputs it processes and the keyed calls it does not apply again.
    @inlinable
    func counting<State, Event, Effect>(
        _ update: Update<
            DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>
        >
    ) -> Update<DurableState<State, Event, Effect>, DurableInput<State, Event>, DurableEffect<State, Event, Effect>> {
        Update { durable, input in
            // A plain event is the program's, and can repeat no key: nothing to count.
            if case .event = input { return update(&durable, input) }
            // Calls repeat keys when they come, or when the entity recovers (those held meanwhile).
            let repeated = durable.repeated
            let effects = update(&durable, input)
            self.repeated(durable.repeated - repeated)
            if case .call = input {} else { self.inputsProcessed.add(1, ordering: .relaxed) }
            return effects
        }
    }

    /// `count` keyed calls were not applied again.
    @inlinable
    func repeated(_ count: Int) {
        if count > 0 { callsRepeated.add(count, ordering: .relaxed) }
    }

    /// The store's work so far.
    @usableFromInline
    var work: StoreWork {
        var work = StoreWork()
        work.recoveries = recoveries.load(ordering: .relaxed)
        work.appends = appends.load(ordering: .relaxed)
        work.eventsAppended = eventsAppended.load(ordering: .relaxed)
        work.failures = failures.load(ordering: .relaxed)
        work.snapshotsSaved = snapshotsSaved.load(ordering: .relaxed)
        work.snapshotsFailed = snapshotsFailed.load(ordering: .relaxed)
        work.callsRepeated = callsRepeated.load(ordering: .relaxed)
        work.callsRefused = callsRefused.load(ordering: .relaxed)
        work.inputsProcessed = inputsProcessed.load(ordering: .relaxed)
        work.tasksRun = tasksRun.load(ordering: .relaxed)
        return work
    }

    /// The program's part of `report`, the underlying loop's: what it counted for the store taken out.
    /// Exact for a loop that drained; after a deadline or a cancellation, the store's tasks cut short
    /// are taken out of the abandoned effects, and its inputs left queued out of the dropped events.
    @usableFromInline
    func program(_ report: LoopReport) -> LoopReport {
        var program = report
        let sent = inputsSent.load(ordering: .relaxed)
        let rejected = inputsRejected.load(ordering: .relaxed)
        let processed = inputsProcessed.load(ordering: .relaxed)
        let (run, ended) = (tasksRun.load(ordering: .relaxed), tasksEnded.load(ordering: .relaxed))
        program.eventsSent = max(0, program.eventsSent - sent)
        program.eventsRejected = max(0, program.eventsRejected - rejected)
        program.eventsProcessed = max(0, program.eventsProcessed - processed)
        program.effectsStarted = max(0, program.effectsStarted - run)
        program.effectsCompleted = max(0, program.effectsCompleted - ended)
        if report.ending != nil {
            program.eventsDropped = max(0, program.eventsDropped - max(0, sent - rejected - processed))
            program.effectsAbandoned = max(0, program.effectsAbandoned - max(0, run - ended))
        }
        return program
    }
}
