public import LoopRuntime

/// Shows a durable loop's activity to an observer of the program's own events and effects: what the
/// loop does for its store (its `recorded` replies, its appends) is left out, so a `LoopLogger` or a
/// `MetricsObserver` sees a durable loop as it would see a plain one.
public struct DurableObserver<State: Sendable, Event: Sendable, Effect: Sendable>: LoopObserver {
    /// The observer shown the program's activity.
    public let observer: any LoopObserver<Event, Effect>
    /// The loop's count of its store's work, taken out of the report of its end.
    @usableFromInline let tally: StoreTally?

    /// Shows `observer` the program's activity.
    public init(_ observer: any LoopObserver<Event, Effect>) {
        self.observer = observer
        self.tally = nil
    }

    /// Shows `observer` the activity of the program of the loop whose store's work `tally` counts.
    @usableFromInline
    init(_ observer: any LoopObserver<Event, Effect>, tally: StoreTally) {
        self.observer = observer
        self.tally = tally
    }

    /// Passes on `activity` if it is the program's.
    public func observe(_ activity: LoopActivity<DurableInput<State, Event>, DurableEffect<State, Event, Effect>>) {
        if case .stopped(let report) = activity, let tally {
            observer.observe(.stopped(tally.program(report)))
        } else if let mapped = Self.program(activity) {
            observer.observe(mapped)
        }
    }

    /// The program's view of `activity`, or `nil` for the store's work.
    @usableFromInline
    static func program(
        _ activity: LoopActivity<DurableInput<State, Event>, DurableEffect<State, Event, Effect>>
    ) -> LoopActivity<Event, Effect>? {
        func event(_ input: DurableInput<State, Event>?) -> Event? {
            switch input {
            case .event(let event, _, _)?: event
            case .call(let call)?: call.event
            default: nil
            }
        }
        func effect(_ effect: DurableEffect<State, Event, Effect>) -> Effect? {
            switch effect {
            case .effect(let effect, _, _, _), .reply(let effect, _, _): effect
            default: nil
            }
        }
        switch activity {
        case .eventProcessed(let input, let origin, let duration, let depth, let outers, let first):
            // The program's effects keep the ids the loop gave them; the first one's id is reported.
            let offset = outers.firstIndex { effect($0) != nil } ?? 0
            return event(input).map {
                .eventProcessed(
                    $0,
                    origin: origin,
                    duration: duration,
                    inboxDepth: depth,
                    effects: outers.compactMap(effect),
                    firstEffect: first.advanced(by: offset)
                )
            }
        case .eventRejected(let input, let reason):
            return event(input).map { .eventRejected($0, reason: reason) }
        case .eventDropped(let input):
            return event(input).map { .eventDropped($0) }
        case .effectStarted(let outer, let id, let lifecycle):
            return effect(outer).map { .effectStarted($0, id: id, lifecycle: lifecycle) }
        case .effectCompleted(let outer, let id, let duration):
            return effect(outer).map { .effectCompleted($0, id: id, duration: duration) }
        case .effectFailed(let outer, let id, let error, let mapped, let duration):
            return effect(outer).map {
                .effectFailed($0, id: id, error: error, mappedTo: event(mapped), duration: duration)
            }
        case .effectCancelled(let outer, let id):
            return effect(outer).map { .effectCancelled($0, id: id) }
        case .effectTimedOut(let outer, let id, let timeout, let mapped):
            return effect(outer).map { .effectTimedOut($0, id: id, timeout: timeout, mappedTo: event(mapped)) }
        case .effectAbandoned(let outer, let id):
            return effect(outer).map { .effectAbandoned($0, id: id) }
        case .effectDropped(let outer, let id):
            return effect(outer).map { .effectDropped($0, id: id) }
        case .sourceFailed(let error):
            return .sourceFailed(error)
        case .sourceFinished:
            return .sourceFinished
        case .stopping:
            return .stopping
        case .stopped(let report):
            return .stopped(report)
        }
    }
}
