public import EffectHandlers
public import LoopCore

/// The asynchronous effects of one loop: those running, and those waiting behind another with their
/// key. A value kept inside ``LoopEngine``; it decides, and counts what it decides in the report it is
/// given.
@usableFromInline
struct EffectTable<Effect: Sendable, Event: Sendable> {
    /// An effect the table let in and that has not ended.
    @usableFromInline
    struct Running {
        @usableFromInline
        var effect: Effect
        @usableFromInline
        var key: EffectKey?
        /// Whether its handler has begun (an uncontrolled effect counts as begun once let in).
        @usableFromInline
        var begun: Bool
        @usableFromInline
        var cancel: CancelHandle?
        @usableFromInline
        var cancelAsked = false
        /// Whether it waits for a delay before it begins (a graceful stop cancels it while it waits).
        @usableFromInline
        var delayed: Bool

        @inlinable
        init(effect: Effect, key: EffectKey?, begun: Bool, delayed: Bool = false) {
            self.effect = effect
            self.key = key
            self.begun = begun
            self.delayed = delayed
        }
    }

    /// A throttle's interval under way for one key, and the effect waiting for its end, if any.
    @usableFromInline
    struct Window {
        @usableFromInline
        var pending: Admitted<Effect, Event>?

        @inlinable
        init() {}
    }

    /// How an effect ended, once the loop's own decisions are counted.
    @usableFromInline
    struct Ended {
        @usableFromInline
        var id: UInt64
        @usableFromInline
        var effect: Effect
        @usableFromInline
        var outcome: EffectOutcome
        /// The effect with the same key that starts now, if one was waiting.
        @usableFromInline
        var next: Admitted<Effect, Event>?

        @inlinable
        init(id: UInt64, effect: Effect, outcome: EffectOutcome, next: Admitted<Effect, Event>?) {
            self.id = id
            self.effect = effect
            self.outcome = outcome
            self.next = next
        }
    }

    /// The id of the last effect given one: every effect an update returns gets the next.
    @usableFromInline
    var lastID: UInt64 = 0
    @usableFromInline
    var running: [UInt64: Running] = [:]
    /// How many effects of each key are running (asked to cancel or not).
    @usableFromInline
    var activeByKey: [EffectKey: Int] = [:]
    /// The running effects of each key not yet asked to cancel, so a cancel visits only those: a stream of
    /// `latest` effects costs O(1) each, not O(running).
    @usableFromInline
    var cancellableByKey: [EffectKey: Set<UInt64>] = [:]
    @usableFromInline
    var queuedByKey: [EffectKey: Queue<Admitted<Effect, Event>>] = [:]
    @usableFromInline
    var queuedCount = 0
    /// Running effects kept as a count only: uncontrolled ones (no key, no timeout), when nobody observes
    /// the loop. Measured: one dictionary entry per effect cost 40% of an async round trip (w2), and only
    /// an observer needs each abandoned effect by name; the report's counts stay exact either way.
    @usableFromInline
    var uncounted = 0
    /// Whether every running effect gets an entry in ``running`` (the loop has an observer).
    @usableFromInline
    let tracksAll: Bool
    /// Effects reported timed out whose handlers have not returned yet.
    @usableFromInline
    var stragglers: Set<UInt64> = []
    /// The throttle intervals under way, by key.
    @usableFromInline
    var windows: [EffectKey: Window] = [:]

    @inlinable
    init(tracksAll: Bool) {
        self.tracksAll = tracksAll
    }

    /// Whether no effect is running or waiting (behind its key, or for a throttle interval).
    @inlinable
    var isEmpty: Bool {
        running.isEmpty && queuedCount == 0 && uncounted == 0 && !windows.values.contains { $0.pending != nil }
    }

    /// Gives ids to the `count` effects an update returned: the first one's; the others' follow it.
    @inlinable
    mutating func reserveIDs(_ count: Int) -> UInt64 {
        let first = lastID &+ 1
        lastID &+= UInt64(truncatingIfNeeded: count)
        return first
    }

    /// Whether `id` is running and has not been resolved (timed out, abandoned).
    @inlinable
    func isLive(_ id: UInt64) -> Bool { running[id] != nil }

    /// Decides how asynchronous effect `id` is let in according to its lifecycle.
    @inlinable
    mutating func admit(
        _ id: UInt64,
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void,
        start: (@Sendable (Effect, Send<Event>, @escaping EffectRouter<Effect, Event>.Completion) -> Void)? = nil,
        holds: Bool = true,
        report: inout LoopCounts
    ) -> Admission<Effect, Event> {
        var cancelling: [CancelHandle] = []
        var cancelled: [IdentifiedEffect<Effect>] = []
        if let key = lifecycle.key {
            let busy = activeByKey[key] != nil || queuedByKey[key] != nil
            switch lifecycle.policy {
            case .serial where busy:
                queuedByKey[key, default: Queue()]
                    .append(Admitted(id: id, effect: effect, lifecycle: lifecycle, perform: perform))
                queuedCount += 1
                return .queued
            case .dropIfRunning where busy:
                report.effectsDropped += 1
                return .dropped
            case .latest:
                (cancelling, cancelled) = cancel(key, report: &report)
            case .cancel:
                let (handles, queued) = cancel(key, report: &report)
                return .cancel(cancelling: handles, cancelled: queued)
            case .throttle:
                return throttle(id, effect, lifecycle, perform, key: key, holds: holds, report: &report)
            default:
                break
            }
        }
        let admitted = Admitted(id: id, effect: effect, lifecycle: lifecycle, perform: perform, start: start)
        enroll(admitted, report: &report)
        return .start(admitted, cancelling: cancelling, cancelled: cancelled)
    }

    /// Admits a throttled effect: it starts now and opens an interval, or, within one, waits for its end
    /// (replacing the one waiting) or is dropped. Unless `holds` (the loop is stopping), nothing waits: an
    /// effect within an interval is dropped.
    @inlinable
    mutating func throttle(
        _ id: UInt64,
        _ effect: Effect,
        _ lifecycle: EffectLifecycle,
        _ perform: @escaping @Sendable (Effect, Send<Event>) async throws -> Void,
        key: EffectKey,
        holds: Bool = true,
        report: inout LoopCounts
    ) -> Admission<Effect, Event> {
        guard var window = windows[key] else {
            let admitted = Admitted(id: id, effect: effect, lifecycle: lifecycle, perform: perform)
            windows[key] = Window()
            enroll(admitted, report: &report)
            return .throttled(admitted, interval: lifecycle.interval ?? .zero)
        }
        guard lifecycle.keepsLatest, holds else {
            report.effectsDropped += 1
            return .dropped
        }
        let replaced = window.pending.map { IdentifiedEffect($0.id, $0.effect) }
        if replaced != nil { report.effectsDropped += 1 }
        window.pending = Admitted(id: id, effect: effect, lifecycle: lifecycle, perform: perform)
        windows[key] = window
        return .held(replacing: replaced)
    }

    /// The throttle interval of `key` ended: the effect that waited for it, now let in, and the interval
    /// it opens; `nil` when none waited (the key is free again).
    @inlinable
    mutating func intervalEnded(_ key: EffectKey, report: inout LoopCounts) -> (Admitted<Effect, Event>, Duration)? {
        guard let window = windows[key] else { return nil }
        guard let pending = window.pending else {
            windows[key] = nil
            return nil
        }
        windows[key] = Window()
        enroll(pending, report: &report)
        return (pending, pending.lifecycle.interval ?? .zero)
    }

    /// A delayed effect's task waits for its delay: `cancel` stops the wait. `false` when it must not run
    /// (cancelled already, or the loop stopped).
    @inlinable
    mutating func arm(_ id: UInt64, cancel: CancelHandle) -> Bool {
        guard var entry = running[id], !entry.cancelAsked else { return false }
        entry.cancel = cancel
        running[id] = entry
        return true
    }

    /// A graceful stop: effects still waiting for their delay, or for a throttle interval, never start.
    /// Returns the handles that stop the waits under way, and the waiting throttled effects, which are
    /// counted cancelled here (the delayed ones are counted as their tasks end).
    @inlinable
    mutating func cancelWaiting(report: inout LoopCounts) -> ([CancelHandle], [IdentifiedEffect<Effect>]) {
        var handles: [CancelHandle] = []
        for (id, entry) in running where entry.delayed && !entry.begun && !entry.cancelAsked {
            running[id]?.cancelAsked = true
            if let cancel = entry.cancel { handles.append(cancel) }
        }
        var cancelled: [IdentifiedEffect<Effect>] = []
        for key in windows.keys {
            if let pending = windows[key]?.pending { cancelled.append(IdentifiedEffect(pending.id, pending.effect)) }
            windows[key]?.pending = nil
        }
        report.effectsCancelled += cancelled.count
        return (handles.sorted { $0.id < $1.id }, cancelled)
    }

    /// Records `admitted` as running. An uncontrolled effect counts as started here; a controlled one
    /// when its task begins (``begin(_:cancel:report:)``), since it can be cancelled before that.
    @inlinable
    mutating func enroll(_ admitted: Admitted<Effect, Event>, report: inout LoopCounts) {
        let controlled = admitted.isControlled
        if !controlled { report.effectsStarted += 1 }
        guard controlled || tracksAll else {
            uncounted += 1
            return
        }
        running[admitted.id] = Running(
            effect: admitted.effect,
            key: admitted.lifecycle.key,
            begun: !controlled,
            delayed: admitted.lifecycle.delay != nil
        )
        if let key = admitted.lifecycle.key {
            activeByKey[key, default: 0] += 1
            cancellableByKey[key, default: []].insert(admitted.id)
        }
    }

    /// Asks every effect with `key` to stop: the cancel handles of those running, and the queued ones,
    /// which never start.
    @inlinable
    mutating func cancel(_ key: EffectKey, report: inout LoopCounts) -> ([CancelHandle], [IdentifiedEffect<Effect>]) {
        var handles: [CancelHandle] = []
        for id in (cancellableByKey.removeValue(forKey: key) ?? []).sorted() {
            guard var entry = running[id], !entry.cancelAsked else { continue }
            entry.cancelAsked = true
            if let cancel = entry.cancel { handles.append(cancel) }
            running[id] = entry
        }
        var waiting = queuedByKey.removeValue(forKey: key) ?? Queue()
        var queued = waiting.removeAll().map { IdentifiedEffect($0.id, $0.effect) }
        queuedCount -= queued.count
        if let pending = windows[key]?.pending {
            windows[key]?.pending = nil
            queued.append(IdentifiedEffect(pending.id, pending.effect))
        }
        report.effectsCancelled += queued.count
        return (handles, queued)
    }

    /// A controlled effect's task begins: records its cancel handle. `false` when it must not run (it was
    /// cancelled before it began, or the loop stopped); then the caller ends it as cancelled.
    @inlinable
    mutating func begin(_ id: UInt64, cancel: CancelHandle, report: inout LoopCounts) -> Bool {
        guard var entry = running[id], !entry.cancelAsked else { return false }
        entry.begun = true
        entry.cancel = cancel
        running[id] = entry
        report.effectsStarted += 1
        return true
    }

    /// Records how `id` ended; `nil` when it had already been resolved (timed out, or abandoned at the
    /// stop), in which case its result is ignored.
    @inlinable
    mutating func end(_ admitted: Admitted<Effect, Event>, _ result: EffectOutcome, report: inout LoopCounts) -> Ended?
    {
        if !admitted.isControlled && !tracksAll {
            uncounted -= 1
            Self.count(result, report: &report)
            return Ended(id: admitted.id, effect: admitted.effect, outcome: result, next: nil)
        }
        guard let entry = running.removeValue(forKey: admitted.id) else { return nil }
        let outcome = entry.cancelAsked ? .cancelled : result
        if entry.begun {
            Self.count(outcome, report: &report)
        } else {
            report.effectsCancelled += 1
        }
        return Ended(
            id: admitted.id,
            effect: entry.effect,
            outcome: outcome,
            next: release(admitted.id, key: entry.key, report: &report)
        )
    }

    /// Counts how a begun effect ended.
    @inlinable
    static func count(_ outcome: EffectOutcome, report: inout LoopCounts) {
        switch outcome {
        case .completed: report.effectsCompleted += 1
        case .failed: report.effectsFailed += 1
        case .timedOut: report.effectsTimedOut += 1
        case .cancelled:
            report.effectsCancelled += 1
            report.effectsCancelledAfterStart += 1
        }
    }

    /// `id` ran past `timeout`: it ends now, timed out (or cancelled, if the loop had asked it to
    /// cancel and its handler has not noticed); its handler's later return is ignored (while
    /// `handlerRunning`, it is counted as a straggler until then). `nil` if it had already ended or had
    /// not begun.
    @inlinable
    mutating func timeOut(
        _ id: UInt64,
        after timeout: Duration,
        handlerRunning: Bool,
        report: inout LoopCounts
    ) -> (Ended, CancelHandle?)? {
        guard let entry = running[id], entry.begun else { return nil }
        running[id] = nil
        if handlerRunning { stragglers.insert(id) }
        let outcome: EffectOutcome = entry.cancelAsked ? .cancelled : .timedOut(timeout)
        Self.count(outcome, report: &report)
        let ended = Ended(
            id: id,
            effect: entry.effect,
            outcome: outcome,
            next: release(id, key: entry.key, report: &report)
        )
        return (ended, entry.cancel)
    }

    /// Frees `id`'s key; the next effect queued behind it, now running, if any.
    @inlinable
    mutating func release(_ id: UInt64, key: EffectKey?, report: inout LoopCounts) -> Admitted<Effect, Event>? {
        guard let key else { return nil }
        let active = (activeByKey[key] ?? 1) - 1
        activeByKey[key] = active > 0 ? active : nil
        cancellableByKey[key]?.remove(id)
        if cancellableByKey[key]?.isEmpty == true { cancellableByKey[key] = nil }
        guard activeByKey[key] == nil, let next = queuedByKey[key]?.popFirst() else { return nil }
        if queuedByKey[key]?.isEmpty == true { queuedByKey[key] = nil }
        queuedCount -= 1
        enroll(next, report: &report)
        return next
    }

    /// The loop stops without waiting: every running effect that began is abandoned (its handler is
    /// cancelled and its result ignored), one that had not begun is cancelled, queued ones never start.
    /// Effects kept as a count only are counted abandoned, not listed.
    @inlinable
    mutating func abandonAll(
        report: inout LoopCounts
    ) -> (abandoned: [IdentifiedEffect<Effect>], cancelling: [CancelHandle], cancelled: [IdentifiedEffect<Effect>]) {
        var abandoned: [IdentifiedEffect<Effect>] = []
        var cancelling: [CancelHandle] = []
        var cancelled: [IdentifiedEffect<Effect>] = []
        for (id, entry) in running.sorted(by: { $0.key < $1.key }) {
            if entry.begun {
                abandoned.append(IdentifiedEffect(id, entry.effect))
                if let cancel = entry.cancel { cancelling.append(cancel) }
            } else {
                cancelled.append(IdentifiedEffect(id, entry.effect))
            }
        }
        for key in queuedByKey.keys {
            for queued in queuedByKey[key]?.removeAll() ?? [] {
                cancelled.append(IdentifiedEffect(queued.id, queued.effect))
            }
        }
        for window in windows.values {
            if let pending = window.pending { cancelled.append(IdentifiedEffect(pending.id, pending.effect)) }
        }
        windows = [:]
        report.effectsAbandoned += abandoned.count + uncounted
        uncounted = 0
        report.effectsCancelled += cancelled.count
        report.timedOutStillRunning += stragglers.count
        running = [:]
        activeByKey = [:]
        cancellableByKey = [:]
        queuedByKey = [:]
        queuedCount = 0
        stragglers = []
        return (abandoned, cancelling, cancelled)
    }
}

/// How an asynchronous effect's handler ended.
@usableFromInline
enum EffectOutcome: Sendable {
    case completed
    case failed(any Error)
    case cancelled
    case timedOut(Duration)
}
