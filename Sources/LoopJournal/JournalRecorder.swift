public import LoopRuntime

/// An observer that records every event a loop processes in a journal, in processing order, with a
/// digest of the state every `digestEvery` events; everything it observes is passed on to `next`.
///
/// ```swift
/// let journal = try JSONLinesJournal<Event>(path: "run.jsonl")
/// let recorder = JournalRecorder<State, Event, Effect>(journal: journal, forwardingTo: LoopLogger())
/// let loop = Loop(program: program, effects: router, observer: recorder)
/// ```
///
/// It is a ``/LoopRuntime/LoopStateObserver``: the loop hands it the state with each processed event,
/// which it reads only for a digest, so it needs no reference to the loop. A record that cannot be
/// written is counted in ``failures`` and passed to `onFailure`; the loop goes on. `onRecorded`
/// receives each sequence number once its record is in the file.
public final class JournalRecorder<State: Encodable & Sendable, Event: Codable & Sendable, Effect: Sendable>:
    LoopStateObserver, Sendable
{
    private struct Progress {
        var sequence = 0
        var failures = 0
    }

    private let journal: JSONLinesJournal<Event>
    private let digestEvery: Int
    private let next: (any LoopObserver<Event, Effect>)?
    private let onFailure: (@Sendable (any Error) -> Void)?
    private let onRecorded: (@Sendable (Int) -> Void)?
    private let progress = Locked(Progress())

    /// Creates a recorder writing to `journal`, with a digest every `digestEvery` events (at least 1).
    public init(
        journal: JSONLinesJournal<Event>,
        digestEvery: Int = 100,
        forwardingTo next: (any LoopObserver<Event, Effect>)? = nil,
        onFailure: (@Sendable (any Error) -> Void)? = nil,
        onRecorded: (@Sendable (Int) -> Void)? = nil
    ) {
        self.journal = journal
        self.digestEvery = max(1, digestEvery)
        self.next = next
        self.onFailure = onFailure
        self.onRecorded = onRecorded
    }

    /// How many events have been recorded.
    public var recorded: Int {
        progress.withLock { $0.sequence - $0.failures }
    }

    /// How many records could not be written.
    public var failures: Int {
        progress.withLock { $0.failures }
    }

    /// Records processed events, with a digest of `state` every `digestEvery` events, and passes
    /// everything on.
    public func observe(_ activity: LoopActivity<Event, Effect>, state: () -> State) {
        if case .eventProcessed(let event, _, _, _, _, _) = activity {
            withoutActuallyEscaping(state) { state in record(event, state: state) }
        }
        next?.observe(activity)
    }

    /// Records processed events without digests (when not given the state) and passes everything on.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        if case .eventProcessed(let event, _, _, _, _, _) = activity { record(event, state: nil) }
        next?.observe(activity)
    }

    private func record(_ event: Event, state: (() -> State)?) {
        let sequence = progress.withLock { progress in
            progress.sequence += 1
            return progress.sequence
        }
        do {
            let current = sequence.isMultiple(of: digestEvery) ? state?() : nil
            let digest = try current.map { try StateDigest.of($0) }
            try journal.append(JournalRecord(sequence: sequence, event: event, digest: digest))
            onRecorded?(sequence)
        } catch {
            progress.withLock { $0.failures += 1 }
            onFailure?(error)
        }
    }
}
