import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// A shop that answers quotes at once and orders after their payment effect reported back.
enum Shop {
    struct State: Equatable, Sendable {
        var quotes = 0
        var waiting: [Int: ReplyTo<String>] = [:]
        var kept: [ReplyTo<Int>] = []
    }

    enum Event: Equatable, Sendable {
        case quote(Int, replyTo: ReplyTo<Int>)
        case order(Int, replyTo: ReplyTo<String>)
        case charged(Int)
        /// Answered only when the loop stops: the update keeps the address.
        case keep(replyTo: ReplyTo<Int>)
        /// Never answered: the update drops the address.
        case ignore(replyTo: ReplyTo<Int>)
    }

    enum Effect: Equatable, Sendable {
        case price(Reply<Int>)
        case confirm(Reply<String>)
        case charge(Int)
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .quote(let item, let replyTo):
            state.quotes += 1
            return [.price(replyTo.reply(item * 10))]
        case .order(let id, let replyTo):
            state.waiting[id] = replyTo
            return [.charge(id)]
        case .charged(let id):
            guard let replyTo = state.waiting.removeValue(forKey: id) else { return [] }
            return [.confirm(replyTo.reply("order \(id) placed"))]
        case .keep(let replyTo):
            state.kept.append(replyTo)
            return []
        case .ignore:
            return []
        }
    }

    static func router(gates: Gates) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .replies { if case .price(let reply) = $0 { reply } else { nil } }
            .replies { if case .confirm(let reply) = $0 { reply } else { nil } }
            .route(
                { if case .charge(let id) = $0 { id } else { nil } },
                to: ClosureEffectHandler { id, send in
                    try await gates.pass("charge")
                    send(.charged(id))
                }
            )
    }

    static func loop(
        gates: Gates = Gates(),
        clock: any Clock<Duration> = ContinuousClock()
    ) -> Loop<
        State, Event, Effect
    > {
        Loop(
            program: Program(first: First(state: State()), update: Update(update)),
            effects: router(gates: gates),
            clock: clock
        )
    }
}

@Suite("Request and reply")
struct RequestTests {
    @Test func aReplyIsAnEffectValueATestAsserts() {
        var state = Shop.State()
        let replyTo = ReplyTo<Int>(id: 7)
        #expect(Shop.update(&state, .quote(3, replyTo: replyTo)) == [.price(replyTo.reply(30))])
        #expect(replyTo.reply(30) == Reply(to: ReplyTo(id: 7), value: 30))
        #expect(replyTo.reply(30) != Reply(to: ReplyTo(id: 8), value: 30))
        // A test's address goes nowhere.
        #expect(replyTo.reply(30).deliver() == false)
    }

    @Test func theCallerGetsTheValueTheUpdateReplied() async throws {
        let loop = Shop.loop()
        let running = Task { try await loop.run() }
        let price = try await loop.request { .quote(4, replyTo: $0) }
        #expect(price == 40)
        loop.stop()
        _ = try await running.value
    }

    @Test func tenThousandConcurrentRequestsEachGetTheirOwnReply() async throws {
        let loop = Shop.loop()
        let running = Task { try await loop.run() }
        let mismatches = try await withThrowingTaskGroup(of: Bool.self) { group in
            for item in 0..<10_000 {
                group.addTask { try await loop.request { .quote(item, replyTo: $0) } == item * 10 }
            }
            return try await group.reduce(0) { $0 + ($1 ? 0 : 1) }
        }
        #expect(mismatches == 0)
        #expect(loop.state.quotes == 10_000)
        loop.stop()
        _ = try await running.value
    }

    @Test func aReplyCanComeAfterAnEffectReportedBack() async throws {
        let gates = Gates()
        let loop = Shop.loop(gates: gates)
        let running = Task { try await loop.run() }
        let order = Task { try await loop.request { .order(5, replyTo: $0) } }
        await waitUntil("the charge is under way") { gates.arrivals("charge") == 1 }
        #expect(loop.state.waiting.keys.contains(5))
        gates.open("charge")
        #expect(try await order.value == "order 5 placed")
        loop.stop()
        _ = try await running.value
    }

    @Test func aLoopStoppedWithRequestsInFlightFailsEveryWaiter() async throws {
        let loop = Shop.loop()
        let running = Task { try await loop.run() }
        let waiters = (0..<50).map { _ in
            Task { () -> RequestError? in
                await failure { try await loop.request { .keep(replyTo: $0) } }
            }
        }
        await waitUntil("every request is kept") { loop.state.kept.count == 50 }
        loop.stop()
        for waiter in waiters { #expect(await waiter.value == .loopStopped) }
        _ = try await running.value
    }

    @Test func aRequestToAStoppedLoopIsRejected() async throws {
        let loop = Shop.loop()
        loop.stop()
        await #expect(throws: RequestError.rejected(.stopped)) {
            try await loop.request { .quote(1, replyTo: $0) }
        }
    }

    @Test func aRequestTheUpdateLetsGoOfFailsAtOnce() async throws {
        let loop = Shop.loop()
        let running = Task { try await loop.run() }
        await #expect(throws: RequestError.unanswered) {
            try await loop.request { .ignore(replyTo: $0) }
        }
        loop.stop()
        _ = try await running.value
    }

    @Test func aRequestTimesOutOnTheLoopsClock() async throws {
        let clock = ManualClock()
        let loop = Shop.loop(clock: clock)
        let running = Task { try await loop.run() }
        let waiter = Task { () -> RequestError? in
            await failure { try await loop.request(timeout: .seconds(2)) { .keep(replyTo: $0) } }
        }
        await waitUntil("the request is kept") { loop.state.kept.count == 1 }
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(1))
        #expect(loop.state.kept.count == 1)
        clock.advance(by: .seconds(1))
        #expect(await waiter.value == .timedOut(after: .seconds(2)))
        // The reply the loop would still give goes nowhere, and changes nothing.
        #expect(loop.state.kept[0].reply(1).deliver() == false)
        loop.stop()
        _ = try await running.value
        #expect(clock.sleeperCount == 0)
    }

    @Test func aCancelledWaiterGetsCancelledAndTheLateReplyIsDropped() async throws {
        let gates = Gates()
        let loop = Shop.loop(gates: gates)
        let running = Task { try await loop.run() }
        let order = Task { () -> RequestError? in
            await failure { try await loop.request { .order(9, replyTo: $0) } }
        }
        await waitUntil("the charge is under way") { gates.arrivals("charge") == 1 }
        order.cancel()
        #expect(await order.value == .cancelled)
        gates.open("charge")
        await waitUntil("the order is settled") { loop.state.waiting.isEmpty }
        loop.stop()
        let report = try await running.value
        #expect(report.effectsFailed == 0)
    }

    @Test func aCancelledTaskSendsNothing() async throws {
        let loop = Shop.loop()
        let running = Task { try await loop.run() }
        let waiter = Task { () -> RequestError? in
            withUnsafeCurrentTask { $0?.cancel() }
            return await failure { try await loop.request { .quote(1, replyTo: $0) } }
        }
        #expect(await waiter.value == .cancelled)
        #expect(loop.state.quotes == 0)
        loop.stop()
        _ = try await running.value
    }

    @Test func anEntityOfAGroupAnswersItsOwnRequests() async throws {
        let group = LoopGroup<String, Shop.State, Shop.Event, Shop.Effect>(
            program: { _ in Program(first: First(state: Shop.State()), update: Update(Shop.update)) },
            effects: Shop.router(gates: Gates())
        )
        let running = Task { try await group.run() }
        let left = try await group.request(to: "left") { .quote(1, replyTo: $0) }
        let right = try await group.request(to: "right") { .quote(2, replyTo: $0) }
        #expect([left, right] == [10, 20])
        #expect(group.state(of: "left")?.quotes == 1)
        let kept = Task { () -> RequestError? in
            await failure { try await group.request(to: "left") { .keep(replyTo: $0) } }
        }
        await waitUntil("the request is kept") { group.state(of: "left")?.kept.count == 1 }
        group.remove("left")
        #expect(await kept.value == .loopStopped)
        group.stop()
        _ = try await running.value
        await #expect(throws: RequestError.rejected(.stopped)) {
            try await group.request(to: "right") { .quote(1, replyTo: $0) }
        }
    }
}

/// The error a request ended with, or `nil` if it got its reply.
func failure<Value>(_ request: () async throws -> Value) async -> RequestError? {
    do {
        _ = try await request()
        return nil
    } catch let error as RequestError {
        return error
    } catch {
        Issue.record("a request threw \(error), not a RequestError")
        return nil
    }
}
