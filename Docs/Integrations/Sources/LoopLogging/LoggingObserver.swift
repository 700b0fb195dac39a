public import Logging
public import LoopRuntime

/// An observer that logs what loops do through swift-log: for a `Loop` (with `Never` for `ID`) or a
/// group of them, durable ones included (with the group's id type: each line names its entity).
///
/// Messages are constant (`effectloop event processed`, `effectloop effect failed`, ...); the detail
/// is in the metadata, under `effectloop.`: the event's or effect's case name, the entity's id, the
/// origin, durations in seconds, the reason of a rejection, the error of a failure. Payloads are left
/// out unless `includingPayloads` (they may hold personal data).
///
/// Levels: each event processed, each effect started and completed `trace`; effects cancelled or
/// dropped by their lifecycle `debug`; the loop stopping and its report `info`; an effect failure the
/// router turned into an event `notice`; rejections, drops, timeouts and abandoned effects `warning`;
/// an effect failure no event was made of and a failed event source `error`. Set the logger's level
/// to choose; nothing below it is formatted.
///
/// ```swift
/// let loop = Loop(program: program, effects: router, observer: LoggingObserver<Never, Event, Effect>(logger: logger))
/// ```
public struct LoggingObserver<ID: Hashable & Sendable, Event: Sendable, Effect: Sendable>: LoopObserver,
    LoopGroupObserver
{
    private let logger: Logger
    private let payloads: Bool
    private let entityName: @Sendable (ID) -> String

    /// Creates an observer logging to `logger`; in a group, each line names its entity by `entities` (by
    /// default its description); `includingPayloads` adds each event's and effect's description.
    public init(
        logger: Logger,
        entities: @escaping @Sendable (ID) -> String = { "\($0)" },
        includingPayloads: Bool = false
    ) {
        self.logger = logger
        self.payloads = includingPayloads
        self.entityName = entities
    }

    /// Logs what a loop did.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        log(activity, entity: nil)
    }

    /// Logs what a loop of a group did, with its entity.
    public func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?) {
        log(activity, entity: entity)
    }

    private func log(_ activity: LoopActivity<Event, Effect>, entity: ID?) {
        let level = Self.level(of: activity)
        guard logger.logLevel <= level else { return }
        var metadata = details(of: activity)
        if let entity { metadata["effectloop.entity"] = "\(entityName(entity))" }
        logger.log(level: level, "\(Self.message(of: activity))", metadata: metadata)
    }

    /// The level an activity is logged at.
    static func level(of activity: LoopActivity<Event, Effect>) -> Logger.Level {
        switch activity {
        case .eventProcessed, .effectStarted, .effectCompleted: .trace
        case .effectCancelled, .effectDropped, .sourceFinished: .debug
        case .stopping, .stopped: .info
        case .effectFailed(_, _, _, let mapped, _): mapped == nil ? .error : .notice
        case .eventRejected, .eventDropped, .effectTimedOut, .effectAbandoned: .warning
        case .sourceFailed: .error
        }
    }

    /// The constant message of an activity.
    static func message(of activity: LoopActivity<Event, Effect>) -> Logger.Message {
        switch activity {
        case .eventProcessed: "effectloop event processed"
        case .eventRejected: "effectloop event rejected"
        case .eventDropped: "effectloop event dropped"
        case .effectStarted: "effectloop effect started"
        case .effectCompleted: "effectloop effect completed"
        case .effectFailed: "effectloop effect failed"
        case .effectCancelled: "effectloop effect cancelled"
        case .effectTimedOut: "effectloop effect timed out"
        case .effectAbandoned: "effectloop effect abandoned"
        case .effectDropped: "effectloop effect dropped"
        case .sourceFailed: "effectloop source failed"
        case .sourceFinished: "effectloop source finished"
        case .stopping: "effectloop stopping"
        case .stopped: "effectloop stopped"
        }
    }

    private func details(of activity: LoopActivity<Event, Effect>) -> Logger.Metadata {
        var metadata: Logger.Metadata = [:]
        switch activity {
        case .eventProcessed(let event, let origin, let duration, let depth, let effects, let first):
            add(event: event, to: &metadata)
            if !effects.isEmpty { metadata["effectloop.first_effect_id"] = "\(first)" }
            metadata["effectloop.origin"] = "\(origin)"
            metadata["effectloop.duration"] = "\(Self.seconds(duration))"
            metadata["effectloop.inbox_depth"] = "\(depth)"
            metadata["effectloop.effects"] = .array(
                effects.map { .string(MetricsObserver<Event, Effect>.caseName($0)) }
            )
        case .eventRejected(let event, let reason):
            add(event: event, to: &metadata)
            metadata["effectloop.reason"] = "\(reason)"
        case .eventDropped(let event):
            add(event: event, to: &metadata)
        case .effectStarted(let effect, let id, let lifecycle):
            add(effect: effect, id: id, to: &metadata)
            metadata["effectloop.lifecycle"] = "\(lifecycle)"
        case .effectCompleted(let effect, let id, let duration):
            add(effect: effect, id: id, to: &metadata)
            metadata["effectloop.duration"] = "\(Self.seconds(duration))"
        case .effectFailed(let effect, let id, let error, let mapped, let duration):
            add(effect: effect, id: id, to: &metadata)
            metadata["effectloop.error"] = "\(error)"
            metadata["effectloop.duration"] = "\(Self.seconds(duration))"
            if let mapped { metadata["effectloop.mapped_to"] = "\(MetricsObserver<Event, Effect>.caseName(mapped))" }
        case .effectTimedOut(let effect, let id, let timeout, let mapped):
            add(effect: effect, id: id, to: &metadata)
            metadata["effectloop.timeout"] = "\(Self.seconds(timeout))"
            if let mapped { metadata["effectloop.mapped_to"] = "\(MetricsObserver<Event, Effect>.caseName(mapped))" }
        case .effectCancelled(let effect, let id), .effectAbandoned(let effect, let id),
            .effectDropped(let effect, let id):
            add(effect: effect, id: id, to: &metadata)
        case .sourceFailed(let error):
            metadata["effectloop.error"] = "\(error)"
        case .sourceFinished, .stopping:
            break
        case .stopped(let report):
            metadata = report.logMetadata
        }
        return metadata
    }

    private func add(event: Event, to metadata: inout Logger.Metadata) {
        metadata["effectloop.event"] = "\(MetricsObserver<Event, Effect>.caseName(event))"
        if payloads { metadata["effectloop.event_payload"] = "\(event)" }
    }

    private func add(effect: Effect, id: EffectID, to metadata: inout Logger.Metadata) {
        metadata["effectloop.effect"] = "\(MetricsObserver<Event, Effect>.caseName(effect))"
        metadata["effectloop.effect_id"] = "\(id)"
        if payloads { metadata["effectloop.effect_payload"] = "\(effect)" }
    }

    /// A duration in seconds, as a decimal number.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

extension LoopReport {
    /// The report's ending and counts, as log metadata (`effectloop.ending`,
    /// `effectloop.events_processed`, ...).
    public var logMetadata: Logger.Metadata {
        [
            "effectloop.ending": "\(ending.map { "\($0)" } ?? "running")",
            "effectloop.events_sent": "\(eventsSent)",
            "effectloop.events_processed": "\(eventsProcessed)",
            "effectloop.events_rejected": "\(eventsRejected)",
            "effectloop.events_dropped": "\(eventsDropped)",
            "effectloop.effects_started": "\(effectsStarted)",
            "effectloop.effects_completed": "\(effectsCompleted)",
            "effectloop.effects_failed": "\(effectsFailed)",
            "effectloop.effects_cancelled": "\(effectsCancelled)",
            "effectloop.effects_timed_out": "\(effectsTimedOut)",
            "effectloop.effects_abandoned": "\(effectsAbandoned)",
        ]
    }
}
