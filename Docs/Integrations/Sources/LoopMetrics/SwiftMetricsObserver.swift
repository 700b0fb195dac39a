public import CoreMetrics
internal import LoopCore
public import LoopRuntime
internal import Metrics
internal import Synchronization

/// An observer that reports what loops do to swift-metrics, with the series of the library's own
/// `MetricsObserver`, so dashboards built on either read the same names:
///
/// | series | kind | dimensions |
/// |---|---|---|
/// | `effectloop_events_processed_total` | counter | `event`, `origin` |
/// | `effectloop_events_rejected_total` | counter | `event`, `reason` |
/// | `effectloop_events_dropped_total` | counter | `event` |
/// | `effectloop_effects_total` | counter | `effect`, `outcome` |
/// | `effectloop_effects_produced_total` | counter | `event`, `effect` |
/// | `effectloop_update_duration_seconds` | timer | `event` |
/// | `effectloop_effect_duration_seconds` | timer | `effect` (completed and failed effects) |
/// | `effectloop_inbox_depth` | gauge | |
/// | `effectloop_source_failures_total` | counter | |
///
/// Cases are named by the enum case's name (never the payload). Each metric object is made once per
/// set of dimensions and kept, not made per activity. Works for a `Loop` and a group (`ID` is then the
/// entities' id type; ids are not a dimension, as there may be millions).
///
/// ```swift
/// MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
/// let loop = Loop(program: program, effects: router, observer: SwiftMetricsObserver<Never, Event, Effect>())
/// ```
public final class SwiftMetricsObserver<ID: Hashable & Sendable, Event: Sendable, Effect: Sendable>: LoopObserver,
    LoopGroupObserver
{
    private let factory: any MetricsFactory
    private let extra: [(String, String)]
    private let counters = MetricTable<Counter>()
    private let timers = MetricTable<Metrics.Timer>()
    private let gauges = MetricTable<Gauge>()

    /// Creates an observer reporting to `factory` (by default the one `MetricsSystem` was bootstrapped
    /// with); `dimensions` are added to every series (a loop's name, say).
    public init(factory: any MetricsFactory = MetricsSystem.factory, dimensions: [(String, String)] = []) {
        self.factory = factory
        self.extra = dimensions
    }

    /// Reports what a loop did.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        record(activity)
    }

    /// Reports what a loop of a group did.
    public func observe(_ activity: LoopActivity<Event, Effect>, of entity: ID?) {
        record(activity)
    }

    private func record(_ activity: LoopActivity<Event, Effect>) {
        switch activity {
        case .eventProcessed(let event, let origin, let duration, let depth, let effects, _):
            let name = Self.name(event)
            for effect in effects {
                counter("effectloop_effects_produced_total", ["event", name, "effect", Self.name(effect)]).increment()
            }
            counter("effectloop_events_processed_total", ["event", name, "origin", "\(origin)"]).increment()
            timer("effectloop_update_duration_seconds", ["event", name]).record(duration: duration)
            inboxDepth().record(depth)
        case .eventRejected(let event, let reason):
            counter("effectloop_events_rejected_total", ["event", Self.name(event), "reason", Self.reason(reason)])
                .increment()
        case .eventDropped(let event):
            counter("effectloop_events_dropped_total", ["event", Self.name(event)]).increment()
        case .effectStarted(let effect, _, _):
            effectCounted(effect, "started")
        case .effectCompleted(let effect, _, let duration):
            effectCounted(effect, "completed")
            timer("effectloop_effect_duration_seconds", ["effect", Self.name(effect)]).record(duration: duration)
        case .effectFailed(let effect, _, _, _, let duration):
            effectCounted(effect, "failed")
            timer("effectloop_effect_duration_seconds", ["effect", Self.name(effect)]).record(duration: duration)
        case .effectCancelled(let effect, _):
            effectCounted(effect, "cancelled")
        case .effectTimedOut(let effect, _, _, _):
            effectCounted(effect, "timed_out")
        case .effectAbandoned(let effect, _):
            effectCounted(effect, "abandoned")
        case .effectDropped(let effect, _):
            effectCounted(effect, "dropped")
        case .sourceFailed:
            counter("effectloop_source_failures_total", []).increment()
        case .sourceFinished, .stopping, .stopped:
            break
        }
    }

    private func effectCounted(_ effect: Effect, _ outcome: String) {
        counter("effectloop_effects_total", ["effect", Self.name(effect), "outcome", outcome]).increment()
    }

    /// The counter for `name` with `dimensions` (name, value, name, value, ...), made once.
    private func counter(_ name: String, _ dimensions: [String]) -> Counter {
        counters.metric(MetricKey(name: name, dimensions: dimensions)) {
            Counter(label: name, dimensions: pairs(dimensions), factory: factory)
        }
    }

    private func timer(_ name: String, _ dimensions: [String]) -> Metrics.Timer {
        timers.metric(MetricKey(name: name, dimensions: dimensions)) {
            Metrics.Timer(label: name, dimensions: pairs(dimensions), preferredDisplayUnit: .seconds, factory: factory)
        }
    }

    private func inboxDepth() -> Gauge {
        gauges.metric(MetricKey(name: "effectloop_inbox_depth", dimensions: [])) {
            Gauge(label: "effectloop_inbox_depth", dimensions: extra, factory: factory)
        }
    }

    private func pairs(_ flat: [String]) -> [(String, String)] {
        extra + stride(from: 0, to: flat.count - 1, by: 2).map { (flat[$0], flat[$0 + 1]) }
    }

    private static func name<Value>(_ value: Value) -> String {
        MetricsObserver<Event, Effect>.caseName(value)
    }

    private static func reason(_ rejection: Rejection) -> String {
        MetricsObserver<Event, Effect>.caseName(rejection)
    }
}

/// A metric's name and dimensions (name, value, name, value, ...).
private struct MetricKey: Hashable, Sendable {
    var name: String
    var dimensions: [String]
}

/// Metric objects of one kind, each made once per name and dimensions. (One table per kind, not a key
/// path into one table of tables: a key path into a generic class's storage is built anew at each use,
/// which cost the observer a quarter of a busy service's CPU.)
private final class MetricTable<Metric: Sendable>: Sendable {
    private let table = Mutex<[MetricKey: Metric]>([:])

    /// The metric kept under `key`, or the one `make` makes (outside the lock), kept unless another
    /// thread kept one first.
    func metric(_ key: MetricKey, make: () -> Metric) -> Metric {
        if let found = table.withLock({ $0[key] }) { return found }
        let made = make()
        return table.withLock { table in
            if let found = table[key] { return found }
            table[key] = made
            return made
        }
    }
}
