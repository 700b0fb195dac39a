import EffectHandlers
import LoopCore
import LoopMetrics
import LoopRuntime
import Metrics
import MetricsTestKit
import Testing

enum Orders {
    enum Event: Sendable, Equatable {
        case place(Int)
        case placed
        case failed
    }

    enum Effect: Sendable, Equatable { case store(Int) }

    struct Full: Error {}

    static let program = Program<Int, Event, Effect>(
        first: First(state: 0),
        update: Update { count, event in
            switch event {
            case .place(let amount): return [.store(amount)]
            case .placed:
                count += 1
                return []
            case .failed: return []
            }
        }
    )

    /// Storing fails for amounts over 100.
    static let router = EffectRouter<Effect, Event>()
        .route(
            { if case .store(let amount) = $0 { amount } else { nil } },
            to: ClosureEffectHandler { amount, send in
                if amount > 100 { throw Full() }
                send(.placed)
            }
        )
        .mapErrors { _, _ in .failed }
}

@Suite struct SwiftMetricsObserverTests {
    @Test func theSeriesOfTheLibrarysObserverAreReportedToTheFactory() async throws {
        let metrics = TestMetrics()
        let observer = SwiftMetricsObserver<String, Orders.Event, Orders.Effect>(
            factory: metrics,
            dimensions: [("loop", "orders")]
        )
        let group = LoopGroup(program: { _ in Orders.program }, effects: Orders.router, observer: observer)
        let running = Task { try await group.run() }
        while !group.isRunning { await Task.yield() }
        for amount in [10, 20, 500] { group.send(.place(amount), to: "customer-\(amount)") }
        group.stop()
        let report = try await running.value
        #expect(report.ending == .drained)

        let place = try metrics.expectCounter(
            "effectloop_events_processed_total",
            [("loop", "orders"), ("event", "place"), ("origin", "outside")]
        )
        #expect(place.totalValue == 3)
        let placed = try metrics.expectCounter(
            "effectloop_events_processed_total",
            [("loop", "orders"), ("event", "placed"), ("origin", "effect")]
        )
        #expect(placed.totalValue == 2)
        let started = try metrics.expectCounter(
            "effectloop_effects_total",
            [("loop", "orders"), ("effect", "store"), ("outcome", "started")]
        )
        #expect(started.totalValue == 3)
        let produced = try metrics.expectCounter(
            "effectloop_effects_produced_total",
            [("loop", "orders"), ("event", "place"), ("effect", "store")]
        )
        #expect(produced.totalValue == 3)
        let failed = try metrics.expectCounter(
            "effectloop_effects_total",
            [("loop", "orders"), ("effect", "store"), ("outcome", "failed")]
        )
        #expect(failed.totalValue == 1)
        let handlers = try metrics.expectTimer(
            "effectloop_effect_duration_seconds",
            [("loop", "orders"), ("effect", "store")]
        )
        #expect(handlers.values.count == 3)
        let updates = try metrics.expectTimer(
            "effectloop_update_duration_seconds",
            [("loop", "orders"), ("event", "place")]
        )
        #expect(updates.values.count == 3)
        #expect(try metrics.expectGauge("effectloop_inbox_depth", [("loop", "orders")]).lastValue != nil)
    }

    @Test func metricObjectsAreMadeOncePerSeries() async throws {
        let metrics = TestMetrics()
        let loop = Loop(
            program: Orders.program,
            effects: Orders.router,
            observer: SwiftMetricsObserver<Never, Orders.Event, Orders.Effect>(factory: metrics)
        )
        let running = Task { try await loop.run() }
        while !loop.isRunning { await Task.yield() }
        for amount in 0..<50 { loop.send(.place(amount)) }
        loop.stop()
        _ = try await running.value
        // 50 events of each of two cases, yet one counter per (name, dimensions).
        #expect(metrics.counters.filter { $0.label == "effectloop_events_processed_total" }.count == 2)
        #expect(
            try metrics.expectCounter("effectloop_events_processed_total", [("event", "place"), ("origin", "outside")])
                .totalValue == 50
        )
        #expect(metrics.timers(label: "effectloop_update_duration_seconds").count == 2)
    }
}
