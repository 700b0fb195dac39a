internal import LoopCore

/// An observer that counts what a loop does, per event case and per effect case, with a latency
/// histogram of the update per event case and of the handler per effect case, and renders it all in the Prometheus text exposition
/// format (version 0.0.4), for a `/metrics` endpoint or a log line.
///
/// ```swift
/// let metrics = MetricsObserver<Event, Effect>()
/// let loop = Loop(program: program, effects: router, observer: metrics)
/// // later, from an HTTP handler or a command:
/// print(metrics.render())
/// ```
///
/// ```text
/// # TYPE effectloop_events_processed_total counter
/// effectloop_events_processed_total{event="submit",origin="outside"} 12
/// # TYPE effectloop_update_duration_seconds histogram
/// effectloop_update_duration_seconds_bucket{event="submit",le="1e-06"} 3
/// ...
/// # TYPE effectloop_effects_total counter
/// effectloop_effects_total{effect="run",outcome="completed"} 11
/// # TYPE effectloop_effect_duration_seconds histogram
/// effectloop_effect_duration_seconds_bucket{effect="run",le="0.1"} 9
/// ```
///
/// Cases are named by `label` (by default the enum case's name, found by reflection, so payloads are
/// never formatted). It keeps one series per label seen; label values are escaped as the format asks.
/// Thread-safe; each activity costs one lock acquisition.
public final class MetricsObserver<Event: Sendable, Effect: Sendable>: LoopObserver {
    /// The upper bounds of the latency buckets (the update's and the handlers'), in seconds.
    public let buckets: [Double]
    private let namespace: String
    private let eventLabel: @Sendable (Event) -> String
    private let effectLabel: @Sendable (Effect) -> String
    private let counts = Locked(Counts())

    /// What has been counted so far.
    public struct Counts: Sendable, Equatable {
        /// Events processed, by event label and origin.
        public var processed: [Key: Int] = [:]
        /// Update latency per event label: the count in each bucket (not cumulative), the sum in
        /// seconds, and the number of observations.
        public var latency: [String: Histogram] = [:]
        /// Events rejected, by event label and reason.
        public var rejected: [Key: Int] = [:]
        /// Events dropped by a full inbox, by event label.
        public var dropped: [String: Int] = [:]
        /// Effects by effect label and outcome (`started`, `completed`, `failed`, `cancelled`,
        /// `timed_out`, `abandoned`, `dropped`).
        public var effects: [Key: Int] = [:]
        /// How long handlers ran, per effect label, for the effects that completed or failed.
        public var effectLatency: [String: Histogram] = [:]
        /// The effects updates returned, by event label and effect label.
        public var produced: [Key: Int] = [:]
        /// Event sources that failed.
        public var sourceFailures = 0
        /// The inbox depth seen after the last event.
        public var inboxDepth = 0
    }

    /// A pair of label values.
    public struct Key: Hashable, Sendable, Comparable {
        /// The case's label.
        public var name: String
        /// The second label (origin, reason or outcome).
        public var detail: String

        /// Creates a key.
        public init(name: String, detail: String) {
            self.name = name
            self.detail = detail
        }

        /// Orders by name, then detail, so the rendering is stable.
        public static func < (lhs: Key, rhs: Key) -> Bool {
            (lhs.name, lhs.detail) < (rhs.name, rhs.detail)
        }
    }

    /// One histogram.
    public struct Histogram: Sendable, Equatable {
        /// Observations per bucket (not cumulative), one more than there are bounds (the last: above all).
        public var buckets: [Int]
        /// The sum of the observations, in seconds.
        public var sum: Double = 0
        /// The number of observations.
        public var count = 0
    }

    /// Creates an observer.
    ///
    /// - Parameters:
    ///   - namespace: the metric names' prefix.
    ///   - buckets: the latency buckets' upper bounds, in seconds, ascending.
    ///   - eventLabel: an event's label (its case name by default).
    ///   - effectLabel: an effect's label (its case name by default).
    public init(
        namespace: String = "effectloop",
        buckets: [Double] = [0.000_001, 0.000_01, 0.000_1, 0.001, 0.01, 0.1, 1],
        eventLabel: @escaping @Sendable (Event) -> String = caseName,
        effectLabel: @escaping @Sendable (Effect) -> String = caseName
    ) {
        self.namespace = namespace
        self.buckets = buckets.sorted()
        self.eventLabel = eventLabel
        self.effectLabel = effectLabel
    }

    /// The name of `value`'s enum case (`submit` for `.submit(spec)`), without formatting its payload;
    /// the type's name for a value that is not an enum with a payload and has no short description.
    @Sendable
    public static func caseName<Value>(_ value: Value) -> String {
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .enum, let label = mirror.children.first?.label { return label }
        let text = String(describing: value)
        return String(text.prefix { $0 != "(" && $0 != " " })
    }

    /// Counts `activity`.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        switch activity {
        case .eventProcessed(let event, let origin, let duration, let depth, let effects, _):
            let label = eventLabel(event)
            let seconds = Self.seconds(duration)
            let bucket = buckets.firstIndex { seconds <= $0 } ?? buckets.count
            let produced = effects.map { Key(name: label, detail: effectLabel($0)) }
            counts.withLock { counts in
                counts.processed[Key(name: label, detail: origin.description), default: 0] += 1
                counts.latency[label, default: Histogram(buckets: Array(repeating: 0, count: buckets.count + 1))]
                    .add(seconds, in: bucket)
                counts.inboxDepth = depth
                for key in produced { counts.produced[key, default: 0] += 1 }
            }
        case .eventRejected(let event, let reason):
            let key = Key(name: eventLabel(event), detail: Self.reasonName(reason))
            counts.withLock { $0.rejected[key, default: 0] += 1 }
        case .eventDropped(let event):
            let label = eventLabel(event)
            counts.withLock { $0.dropped[label, default: 0] += 1 }
        case .effectStarted(let effect, _, _): count(effect, "started")
        case .effectCompleted(let effect, _, let duration): count(effect, "completed", ran: duration)
        case .effectFailed(let effect, _, _, _, let duration): count(effect, "failed", ran: duration)
        case .effectCancelled(let effect, _): count(effect, "cancelled")
        case .effectTimedOut(let effect, _, _, _): count(effect, "timed_out")
        case .effectAbandoned(let effect, _): count(effect, "abandoned")
        case .effectDropped(let effect, _): count(effect, "dropped")
        case .sourceFailed: counts.withLock { $0.sourceFailures += 1 }
        case .sourceFinished, .stopping, .stopped: break
        }
    }

    private func count(_ effect: Effect, _ outcome: String, ran duration: Duration? = nil) {
        let key = Key(name: effectLabel(effect), detail: outcome)
        guard let duration else { return counts.withLock { $0.effects[key, default: 0] += 1 } }
        let seconds = Self.seconds(duration)
        let bucket = buckets.firstIndex { seconds <= $0 } ?? buckets.count
        let empty = Histogram(buckets: Array(repeating: 0, count: buckets.count + 1))
        counts.withLock { counts in
            counts.effects[key, default: 0] += 1
            counts.effectLatency[key.name, default: empty].add(seconds, in: bucket)
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private static func reasonName(_ rejection: Rejection) -> String {
        switch rejection {
        case .stopping: "stopping"
        case .stopped: "stopped"
        case .inboxFull: "inbox_full"
        case .effectEnded: "effect_ended"
        case .failed: "failed"
        default: "other"
        }
    }

    /// What has been counted so far.
    public var snapshot: Counts {
        counts.withLock { $0 }
    }

    /// Everything counted so far, in the Prometheus text exposition format.
    public func render() -> String {
        let counts = snapshot
        var lines: [String] = []
        func family(_ name: String, _ type: String, _ help: String) {
            lines.append("# HELP \(namespace)_\(name) \(help)")
            lines.append("# TYPE \(namespace)_\(name) \(type)")
        }
        func sample(_ name: String, _ labels: [(String, String)], _ value: String) {
            let rendered = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",")
            lines.append("\(namespace)_\(name)" + (labels.isEmpty ? "" : "{\(rendered)}") + " \(value)")
        }
        family("events_processed_total", "counter", "Events processed, by case and origin.")
        for (key, value) in counts.processed.sorted(by: { $0.key < $1.key }) {
            sample("events_processed_total", [("event", key.name), ("origin", key.detail)], "\(value)")
        }
        func histograms(_ name: String, _ label: String, _ series: [String: Histogram]) {
            for (value, histogram) in series.sorted(by: { $0.key < $1.key }) {
                var cumulative = 0
                for (index, bound) in buckets.enumerated() {
                    cumulative += histogram.buckets[index]
                    sample("\(name)_bucket", [(label, value), ("le", "\(bound)")], "\(cumulative)")
                }
                sample("\(name)_bucket", [(label, value), ("le", "+Inf")], "\(histogram.count)")
                sample("\(name)_sum", [(label, value)], "\(histogram.sum)")
                sample("\(name)_count", [(label, value)], "\(histogram.count)")
            }
        }
        family("update_duration_seconds", "histogram", "Time in the update (and deciding its effects), by event case.")
        histograms("update_duration_seconds", "event", counts.latency)
        family("events_rejected_total", "counter", "Events refused, by case and reason.")
        for (key, value) in counts.rejected.sorted(by: { $0.key < $1.key }) {
            sample("events_rejected_total", [("event", key.name), ("reason", key.detail)], "\(value)")
        }
        family("events_dropped_total", "counter", "Events dropped by a full inbox, by case.")
        for (label, value) in counts.dropped.sorted(by: { $0.key < $1.key }) {
            sample("events_dropped_total", [("event", label)], "\(value)")
        }
        family("effects_total", "counter", "Effects, by case and outcome.")
        for (key, value) in counts.effects.sorted(by: { $0.key < $1.key }) {
            sample("effects_total", [("effect", key.name), ("outcome", key.detail)], "\(value)")
        }
        family("effects_produced_total", "counter", "Effects the update returned, by event case and effect case.")
        for (key, value) in counts.produced.sorted(by: { $0.key < $1.key }) {
            sample("effects_produced_total", [("event", key.name), ("effect", key.detail)], "\(value)")
        }
        family("effect_duration_seconds", "histogram", "Time a handler ran, by effect case (completed or failed).")
        histograms("effect_duration_seconds", "effect", counts.effectLatency)
        family("source_failures_total", "counter", "Event sources that failed.")
        sample("source_failures_total", [], "\(counts.sourceFailures)")
        family("inbox_depth", "gauge", "Events waiting in the inbox after the last one processed.")
        sample("inbox_depth", [], "\(counts.inboxDepth)")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A label value as the format asks: backslash, double quote and newline escaped.
    static func escape(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}

extension MetricsObserver.Histogram {
    mutating func add(_ seconds: Double, in bucket: Int) {
        buckets[bucket] += 1
        sum += seconds
        count += 1
    }
}
