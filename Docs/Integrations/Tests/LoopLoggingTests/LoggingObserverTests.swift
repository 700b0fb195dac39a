import EffectHandlers
import InMemoryLogging
import Logging
import LoopCore
import LoopLogging
import LoopRuntime
import Testing

enum Shop {
    enum Event: Sendable, Equatable {
        case order(customer: String)
        case charged
        case failed(String)
    }

    enum Effect: Sendable, Equatable {
        case charge(card: String)
        case refund
    }

    struct Declined: Error, CustomStringConvertible {
        var description: String { "declined" }
    }

    static let program = Program<Int, Event, Effect>(
        first: First(state: 0),
        update: Update { count, event in
            switch event {
            case .order(let customer): return customer == "refund" ? [.refund] : [.charge(card: "4111-\(customer)")]
            case .charged:
                count += 1
                return []
            case .failed: return []
            }
        }
    )

    /// Charges fail for the card of "bad" (mapped to an event); refunds always fail (mapped to nothing).
    static let router = EffectRouter<Effect, Event>()
        .route(
            { if case .charge(let card) = $0 { card } else { nil } },
            to: ClosureSyncEffectHandler { card, send in
                if card.hasSuffix("bad") { throw Declined() }
                send(.charged)
            }
        )
        .route({ $0 == .refund ? () : nil }, to: ClosureSyncEffectHandler { _, _ in throw Declined() })
        .mapErrors { effect, error in if case .charge = effect { .failed("\(error)") } else { nil } }
}

@Suite struct LoggingObserverTests {
    func logged(
        level: Logger.Level,
        payloads: Bool = false,
        _ events: [Shop.Event]
    ) async throws -> [InMemoryLogHandler.Entry] {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in handler })
        logger.logLevel = level
        let group = LoopGroup<String, Int, Shop.Event, Shop.Effect>(
            program: { _ in Shop.program },
            effects: Shop.router,
            observer: LoggingObserver<String, Shop.Event, Shop.Effect>(logger: logger, includingPayloads: payloads)
        )
        let running = Task { try await group.run() }
        while !group.isRunning { await Task.yield() }
        for event in events { group.send(event, to: "shop-1") }
        group.stop()
        _ = try await running.value
        return handler.entries
    }

    @Test func eachEventIsATraceLineWithItsCaseAndEntityButNoPayload() async throws {
        let entries = try await logged(level: .trace, [.order(customer: "ann")])
        let processed = try #require(entries.first { $0.message == "effectloop event processed" })
        #expect(processed.level == .trace)
        #expect(processed.metadata["effectloop.event"] == "order")
        #expect(processed.metadata["effectloop.entity"] == "shop-1")
        #expect(processed.metadata["effectloop.origin"] == "outside")
        #expect(processed.metadata["effectloop.effects"] == .array(["charge"]))
        #expect(processed.metadata["effectloop.duration"] != nil)
        // The customer's name and card are payloads: not logged by default.
        let everything = entries.map { "\($0.message) \($0.metadata)" }.joined()
        #expect(!everything.contains("ann"))
        #expect(!everything.contains("4111"))
        let started = try #require(entries.first { $0.message == "effectloop effect started" })
        #expect(started.metadata["effectloop.effect"] == "charge")
        // The effect's id pairs its start with its end, and names it among the event's effects.
        let id = try #require(started.metadata["effectloop.effect_id"])
        #expect(processed.metadata["effectloop.first_effect_id"] == id)
        let ended = entries.filter {
            $0.message != "effectloop effect started" && $0.metadata["effectloop.effect_id"] == id
        }
        #expect(ended.map(\.message) == ["effectloop effect completed"])
    }

    @Test func payloadsAreLoggedOnlyWhenAskedFor() async throws {
        let entries = try await logged(level: .trace, payloads: true, [.order(customer: "ann")])
        let processed = try #require(entries.first { $0.message == "effectloop event processed" })
        #expect(processed.metadata["effectloop.event_payload"] == "order(customer: \"ann\")")
    }

    @Test func anUnmappedFailureIsAnErrorAndAMappedOneANotice() async throws {
        let entries = try await logged(level: .info, [.order(customer: "bad"), .order(customer: "refund")])
        let failures = entries.filter { $0.message == "effectloop effect failed" }
        #expect(failures.map(\.level) == [.notice, .error])
        #expect(failures.map { $0.metadata["effectloop.effect"] } == ["charge", "refund"])
        #expect(failures.first?.metadata["effectloop.mapped_to"] == "failed")
        #expect(failures.last?.metadata["effectloop.error"] == "declined")
        // Below the logger's level, nothing is logged (nor formatted).
        #expect(!entries.contains { $0.level < .info })
        #expect(entries.last?.message == "effectloop stopped")
        #expect(entries.last?.metadata["effectloop.ending"] == "drained")
    }

    @Test func aRejectionIsAWarning() async throws {
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test", factory: { _ in handler })
        let loop = Loop(
            program: Shop.program,
            effects: Shop.router,
            observer: LoggingObserver<Never, Shop.Event, Shop.Effect>(logger: logger)
        )
        loop.stop()
        #expect(loop.send(.charged) == .rejected(.stopped))
        let rejected = try #require(handler.entries.first { $0.message == "effectloop event rejected" })
        #expect(rejected.level == .warning)
        #expect(rejected.metadata["effectloop.event"] == "charged")
        #expect(rejected.metadata["effectloop.reason"] != nil)
        #expect(rejected.metadata["effectloop.entity"] == nil)
    }
}
