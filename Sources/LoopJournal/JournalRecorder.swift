public import LoopRuntime

/// An observer that records every event a loop processes in a journal, in processing order, with a
/// digest of the state every `digestEvery` events; everything it observes is passed on to `next`.
///
/// ```swift
/// let journal = try JSONLinesJournal<Event>(path: "run.jsonl")
/// let recorder = JournalRecorder<State, Event, Effect>(journal: journal, forwardingTo: LoopLogger())
/// let loop = Loop(program: program, effects: router, observer: recorder)
/// recorder.attach(to: loop)
/// ```
///
/// The observer runs on the thread that processed the event before that thread processes another, so
/// the state it reads for a digest is the state right after the event. A record that cannot be
/// written is counted in ``failures`` and passed to `onFailure`; the loop goes on. `onRecorded`
/// receives each sequence number once its record is in the file.
public final class JournalRecorder<State: Encodable & Sendable, Event: Codable & Sendable, Effect: Sendable>:
    LoopObserver, Sendable
{
    private struct Progress {
        var sequence = 0
        var failures = 0
        var state: (@Sendable () -> State?)?
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

    /// Lets the recorder read `loop`'s state for its digests. Call it before the loop starts.
    public func attach(to loop: Loop<State, Event, Effect>) {
        // Weakly: the loop holds this recorder as its observer, so a strong capture would be a cycle.
        progress.withLock { $0.state = { [weak loop] in loop?.state } }
    }

    /// How many events have been recorded.
    public var recorded: Int {
        progress.withLock { $0.sequence - $0.failures }
    }

    /// How many records could not be written.
    public var failures: Int {
        progress.withLock { $0.failures }
    }

    /// Records processed events and passes everything on.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        if case .eventProcessed(let event, _, _, _) = activity { record(event) }
        next?.observe(activity)
    }

    private func record(_ event: Event) {
        let (sequence, state) = progress.withLock { progress in
            progress.sequence += 1
            return (progress.sequence, progress.state)
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
