import EffectHandlers
import InMemoryTracing
import Instrumentation
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTracing
import Synchronization
import Testing
import Tracing

enum Checkout {
    enum Event: Codable, Sendable, Equatable {
        case pay(Int)
        case paid(Int)
        case refused
    }

    enum Effect: Sendable, Equatable {
        case charge(Int)
        case email(Int)
    }

    struct Declined: Error {}

    /// The span each email's handler ran in, by amount.
    final class Emails: Sendable {
        private let seen = Mutex<[Int: String?]>([:])

        var count: Int { seen.withLock { $0.count } }

        subscript(amount: Int) -> String?? { seen.withLock { $0[amount] } }

        func record(_ amount: Int, _ span: String?) { seen.withLock { $0[amount] = span } }
    }

    static let program = Program<[Int], Event, Effect>(
        first: First(state: []),
        update: Update { paid, event in
            switch event {
            case .pay(let amount): return [.charge(amount)]
            case .paid(let amount):
                paid.append(amount)
                return [.email(amount)]
            case .refused: return []
            }
        }
    )

    /// Charges above 100 are declined; each email records the trace it runs in. `events`: whether each
    /// event gets a span too.
    static func router(tracer: InMemoryTracer, emails: Emails, events: Bool = true) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .route(
                { if case .charge(let amount) = $0 { amount } else { nil } },
                to: ClosureEffectHandler { amount, send in
                    if amount > 100 { throw Declined() }
                    send(.paid(amount))
                }
            )
            .route(
                { if case .email(let amount) = $0 { amount } else { nil } },
                to: ClosureSyncEffectHandler { amount, _ in
                    emails.record(
                        amount,
                        ServiceContext.current.flatMap { tracer.activeSpan(identifiedBy: $0)?.operationName }
                    )
                }
            )
            .mapErrors { _, _ in .refused }
            .scoped(
                events
                    ? LoopTracing.scope(tracer: tracer)
                    : LoopTracing.scope(tracer: tracer, eventName: nil)
            )
    }
}

@Suite struct LoopTracingTests {
    /// Runs the checkout on a loop: pays each amount of `requests` inside a span of its own (as an
    /// instrumented HTTP server runs its handlers; `nil`: outside any span), waits until `done`, and
    /// returns the spans and the emails.
    func traced(
        events: Bool = true,
        paying requests: [Int?],
        until done: @escaping (LoopReport, Checkout.Emails) -> Bool
    ) async throws -> (spans: [FinishedInMemorySpan], emails: Checkout.Emails) {
        let tracer = InMemoryTracer()
        let emails = Checkout.Emails()
        let loop = Loop(
            program: Checkout.program,
            effects: Checkout.router(tracer: tracer, emails: emails, events: events)
        )
        let running = Task { try await loop.run() }
        while !loop.isRunning { await Task.yield() }
        for request in requests {
            if let amount = request {
                tracer.withSpan("POST /pay \(amount)", ofKind: .server) { _ in _ = loop.send(.pay(amount)) }
            } else {
                loop.send(.pay(1))
            }
        }
        for _ in 0..<100_000 where !done(loop.report, emails) { try await Task.sleep(for: .milliseconds(1)) }
        loop.stop()
        _ = try await running.value
        return (tracer.finishedSpans, emails)
    }

    @Test func eachEffectIsASpanUnderTheRequestThatCausedIt() async throws {
        let (spans, emails) = try await traced(paying: [10, 500]) { report, emails in
            emails.count >= 1 && report.effectsFailed >= 1
        }
        let request10 = try #require(spans.first { $0.operationName == "POST /pay 10" })
        let request500 = try #require(spans.first { $0.operationName == "POST /pay 500" })
        let charges = spans.filter { $0.operationName == "effect charge" }
        #expect(charges.count == 2)
        let charge10 = try #require(charges.first { $0.parentSpanID == request10.spanID })
        #expect(charge10.traceID == request10.traceID)
        let charge500 = try #require(charges.first { $0.parentSpanID == request500.spanID })
        #expect(charge500.errors.count == 1)
        // The email follows the event the charge's handler sent: a child of the charge, in the first
        // request's trace.
        let email = try #require(spans.first { $0.operationName == "effect email" })
        #expect(email.traceID == request10.traceID)
        #expect(email.parentSpanID == charge10.spanID)
        // While the email's handler ran, its own span was the current context.
        #expect(emails[10] == .some("effect email"))
    }

    @Test func anEventSentOutsideAnySpanStartsARootSpanAndItsFollowUpsAreItsChildren() async throws {
        let (spans, _) = try await traced(paying: [nil]) { _, emails in emails.count >= 1 }
        let charge = try #require(spans.first { $0.operationName == "effect charge" })
        let email = try #require(spans.first { $0.operationName == "effect email" })
        #expect(charge.parentSpanID == nil)
        #expect(email.parentSpanID == charge.spanID)
    }

    @Test func eachEventIsASpanUnderTheContextItWasSentWithBesideItsEffects() async throws {
        let (spans, _) = try await traced(paying: [10]) { _, emails in emails.count >= 1 }
        let request = try #require(spans.first { $0.operationName == "POST /pay 10" })
        let charge = try #require(spans.first { $0.operationName == "effect charge" })
        // The request's event: a child of the request, covering the update, ended before its effect began.
        let pay = try #require(spans.first { $0.operationName == "event pay" })
        #expect(pay.parentSpanID == request.spanID && pay.traceID == request.traceID)
        #expect(pay.startInstant.nanosecondsSinceEpoch <= pay.endInstant.nanosecondsSinceEpoch)
        #expect(pay.endInstant.nanosecondsSinceEpoch <= charge.startInstant.nanosecondsSinceEpoch)
        #expect(charge.parentSpanID == request.spanID)
        // The event the charge's handler sent is under the charge's span, as the email is.
        let paid = try #require(spans.first { $0.operationName == "event paid" })
        #expect(paid.parentSpanID == charge.spanID)
        #expect(spans.filter { $0.operationName.hasPrefix("event ") }.count == 2)
    }

    @Test func eventSpansAreLeftOutWhenTheScopeIsToldNotToName() async throws {
        let (spans, _) = try await traced(events: false, paying: [10]) { _, emails in emails.count >= 1 }
        #expect(spans.map(\.operationName).sorted() == ["POST /pay 10", "effect charge", "effect email"])
    }

    @Test func aDurableRequestsEventAndEffectSpansAreChildrenOfTheRequest() async throws {
        let tracer = InMemoryTracer()
        let emails = Checkout.Emails()
        let program = DurableProgram(initial: [Int](), update: Checkout.program.update)
        let payments = DurableLoopGroup<String, [Int], Checkout.Event, Checkout.Effect>(
            program: program,
            effects: Checkout.router(tracer: tracer, emails: emails),
            store: InMemoryEventStore()
        )
        let running = Task { try await payments.run() }
        while !payments.underlying.isRunning { await Task.yield() }
        // Each request is recorded with others in one append; its effects run once it is recorded,
        // still under its own request.
        for amount in [10, 20] {
            try await tracer.withSpan("POST /pay \(amount)", ofKind: .server) { _ in
                _ = try await payments.sendDurably(.pay(amount), to: "shop")
            }
        }
        for _ in 0..<100_000 where emails.count < 2 { try await Task.sleep(for: .milliseconds(1)) }
        payments.stop()
        _ = try await running.value

        let spans = tracer.finishedSpans
        for amount in [10, 20] {
            let request = try #require(spans.first { $0.operationName == "POST /pay \(amount)" })
            let children = spans.filter { $0.parentSpanID == request.spanID }.map(\.operationName)
            #expect(children.sorted() == ["effect charge", "event pay"])
        }
        // The store's work (recovery, appends, acknowledgements) is not traced as the program's.
        #expect(spans.filter { $0.operationName.hasPrefix("event ") }.count == 4)
        #expect(spans.filter { $0.operationName.hasPrefix("effect ") }.count == 4)
    }
}
