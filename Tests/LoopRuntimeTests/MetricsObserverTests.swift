import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

@Suite struct MetricsObserverTests {
    enum Event: Equatable, Sendable {
        case add(Int)
        case ping
        case pong
    }

    enum Effect: Equatable, Sendable {
        case answer(String)
        case fail
    }

    static let program = Program<Int, Event, Effect>(
        first: First(state: 0),
        update: Update { total, event in
            switch event {
            case .add(let value):
                total += value
                return value < 0 ? [.fail] : []
            case .ping: return [.answer("with \"quotes\"\nand a newline")]
            case .pong: return []
            }
        }
    )

    static let router = EffectRouter<Effect, Event>()
        .route({ if case .answer = $0 { () } else { nil } }, to: ClosureSyncEffectHandler { _, send in send(.pong) })
        .route({ if case .fail = $0 { () } else { nil } }, to: ClosureSyncEffectHandler { _, _ in throw Refusal() })

    struct Refusal: Error {}

    @Test func itCountsEventsAndEffectsByCaseAndRendersThePrometheusFormat() async throws {
        let metrics = MetricsObserver<Event, Effect>()
        let loop = Loop(program: Self.program, effects: Self.router, observer: metrics)
        let running = Task { try await loop.run() }
        _ = await loop.waitUntilRunning()
        for event in [Event.add(1), .add(2), .ping, .add(-1)] { loop.send(event) }
        loop.stop()
        _ = try await running.value
        #expect(loop.send(.add(5)) == .rejected(.stopped))

        let counts = metrics.snapshot
        #expect(counts.processed[.init(name: "add", detail: "outside")] == 3)
        #expect(counts.processed[.init(name: "ping", detail: "outside")] == 1)
        #expect(counts.processed[.init(name: "pong", detail: "effect")] == 1)
        #expect(counts.latency["add"]?.count == 3 && counts.latency["add"]?.buckets.reduce(0, +) == 3)
        #expect(counts.effects[.init(name: "answer", detail: "completed")] == 1)
        #expect(counts.effects[.init(name: "fail", detail: "failed")] == 1)
        #expect(counts.rejected[.init(name: "add", detail: "stopped")] == 1)
        #expect(counts.produced == [.init(name: "ping", detail: "answer"): 1, .init(name: "add", detail: "fail"): 1])
        #expect(counts.effectLatency["answer"]?.count == 1 && counts.effectLatency["fail"]?.count == 1)

        let text = metrics.render()
        for line in [
            "# TYPE effectloop_events_processed_total counter",
            #"effectloop_events_processed_total{event="add",origin="outside"} 3"#,
            #"effectloop_update_duration_seconds_bucket{event="add",le="+Inf"} 3"#,
            #"effectloop_update_duration_seconds_count{event="add"} 3"#,
            #"effectloop_effects_total{effect="fail",outcome="failed"} 1"#,
            #"effectloop_effects_produced_total{event="ping",effect="answer"} 1"#,
            #"effectloop_effect_duration_seconds_count{effect="answer"} 1"#,
            #"effectloop_events_rejected_total{event="add",reason="stopped"} 1"#,
            "effectloop_source_failures_total 0",
        ] {
            #expect(text.split(separator: "\n").contains(Substring(line)), "missing: \(line)")
        }
        // Buckets are cumulative, and every line is a comment or `name{labels} value`.
        let addBuckets = text.split(separator: "\n").filter {
            $0.hasPrefix(#"effectloop_update_duration_seconds_bucket{event="add""#)
        }
        let values = addBuckets.compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }
        #expect(values == values.sorted() && values.count == 8)
    }

    @Test func handlerLatencyGoesIntoItsEffectsBuckets() {
        let metrics = MetricsObserver<Event, Effect>(buckets: [0.001, 0.1])
        metrics.observe(.effectCompleted(.answer("a"), id: EffectID(rawValue: 1), duration: .microseconds(500)))
        metrics.observe(.effectCompleted(.answer("b"), id: EffectID(rawValue: 2), duration: .milliseconds(50)))
        metrics.observe(
            .effectFailed(.fail, id: EffectID(rawValue: 3), error: Refusal(), mappedTo: nil, duration: .seconds(2))
        )
        let lines = metrics.render().split(separator: "\n")
        for line in [
            #"effectloop_effect_duration_seconds_bucket{effect="answer",le="0.001"} 1"#,
            #"effectloop_effect_duration_seconds_bucket{effect="answer",le="0.1"} 2"#,
            #"effectloop_effect_duration_seconds_bucket{effect="answer",le="+Inf"} 2"#,
            #"effectloop_effect_duration_seconds_sum{effect="answer"} 0.0505"#,
            #"effectloop_effect_duration_seconds_bucket{effect="fail",le="0.1"} 0"#,
            #"effectloop_effect_duration_seconds_bucket{effect="fail",le="+Inf"} 1"#,
        ] {
            #expect(lines.contains(Substring(line)), "missing: \(line)")
        }
    }

    @Test func caseNamesNeverFormatPayloadsAndLabelsAreEscaped() {
        #expect(MetricsObserver<Event, Effect>.caseName(Event.add(3)) == "add")
        #expect(MetricsObserver<Event, Effect>.caseName(Event.ping) == "ping")
        #expect(MetricsObserver<Event, Effect>.caseName(Effect.answer("x")) == "answer")
        let metrics = MetricsObserver<Event, Effect>(eventLabel: { _ in "a\"b\\c\nd" })
        metrics.observe(
            .eventProcessed(
                .ping,
                origin: .outside,
                duration: .zero,
                inboxDepth: 0,
                effects: [],
                firstEffect: EffectID(rawValue: 1)
            )
        )
        #expect(metrics.render().contains(#"event="a\"b\\c\nd""#))
    }
}
