import Hummingbird
import HummingbirdTesting
import InMemoryTracing
import Instrumentation
import LoopCore
import LoopPersistence
import LoopRuntime
import Testing
import Tracing

/// The process's tracer: `InstrumentationSystem` takes one, once, and Hummingbird's
/// `TracingMiddleware` traces with it.
enum ProcessTracer {
    static let shared: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()
}

@Suite struct HTTPRequestSpanTests {
    /// A real Hummingbird route under `TracingMiddleware` sends a durable event: the event's span and its
    /// effect's span are children of the span the middleware started for the HTTP request, and the
    /// effect's follow-up stays in that trace.
    @Test func aDurableEventsSpansAreChildrenOfTheHTTPRequestsSpan() async throws {
        let tracer = ProcessTracer.shared
        let emails = Checkout.Emails()
        let payments = DurableLoopGroup<String, [Int], Checkout.Event, Checkout.Effect>(
            program: DurableProgram(initial: [], update: Checkout.program.update),
            effects: Checkout.router(tracer: tracer, emails: emails),
            store: InMemoryEventStore()
        )
        let running = Task { try await payments.run() }
        let router = Router()
        router.add(middleware: TracingMiddleware())
        router.post("/pay/{amount}") { _, context -> HTTPResponse.Status in
            let amount = try context.parameters.require("amount", as: Int.self)
            _ = try await payments.sendDurably(.pay(amount), to: "shop")
            return .ok
        }
        try await Application(router: router).test(.router) { client in
            try await client.execute(uri: "/pay/7", method: .post) { response in #expect(response.status == .ok) }
        }
        for _ in 0..<100_000 where emails.count < 1 { try await Task.sleep(for: .milliseconds(1)) }
        payments.stop()
        _ = try await running.value

        // Other tests' spans may share this tracer: look at this request's trace only.
        let spans = tracer.finishedSpans
        let request = try #require(spans.first { $0.operationName == "/pay/{amount}" && $0.kind == .server })
        let trace = spans.filter { $0.traceID == request.traceID }
        let event = try #require(trace.first { $0.operationName == "event pay" })
        let charge = try #require(trace.first { $0.operationName == "effect charge" })
        let email = try #require(trace.first { $0.operationName == "effect email" })
        #expect(event.parentSpanID == request.spanID)
        #expect(charge.parentSpanID == request.spanID)
        #expect(email.parentSpanID == charge.spanID)
        #expect(emails[7] == .some("effect email"))
    }
}
