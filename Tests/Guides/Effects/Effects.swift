// The code of Docs/Effects.md. Each region between `// snippet` and `// end snippet` is one code block of
// the guide, in order, as the guide shows it (`make lint` compares them; `swift .ci/guide-check.swift
// --write` copies them in). What sits outside the regions is what a block needs around it to compile.

import EffectHandlers
import LoopCore
import LoopRuntime
import Synchronization
import Testing

// The job runner's world, for the handlers and their router.

struct Job: Identifiable, Equatable, Sendable {
    let id: Int
    var command: String
    var timeout: Duration?
}

/// Runs a command; its exit status.
struct Shell: Sendable {
    let execute: @Sendable (String) async throws -> Int32
    func run(_ command: String) async throws -> Int32 { try await execute(command) }
}

/// Counts by name.
final class Registry: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    func increment(_ name: String) { counts.withLock { $0[name, default: 0] += 1 } }
    func count(of name: String) -> Int { counts.withLock { $0[name, default: 0] } }
}

struct Unreachable: Error {}

/// The handlers' events and effects are this test's own: the guide's request example has its own `Event`
/// and `Effect` at the top level.
@Test func theRouterRunsJobsCountsAndTurnsErrorsIntoEvents() async throws {
    struct Jobs: Equatable, Sendable {
        var finished: [Job.ID: Int32] = [:]
        var failures: [String] = []
    }

    enum Event: Equatable, Sendable {
        case submitted(Job)
        case finished(Job.ID, exitStatus: Int32)
        case effectFailed(String, String)
    }

    enum Effect: Equatable, Sendable {
        case run(Job)
        case count(String)
    }

    @Sendable func update(_ state: inout Jobs, _ event: Event) -> [Effect] {
        switch event {
        case .submitted(let job): return [.count("submitted"), .run(job)]
        case .finished(let id, let status): state.finished[id] = status
        case .effectFailed(_, let error): state.failures.append(error)
        }
        return []
    }

    // snippet imports EffectHandlers LoopCore
    /// Waits for something: a process, a socket, a database. Runs in a task of its own.
    struct JobRunner: EffectHandler {
        let shell: Shell  // a service, injected

        func handle(_ job: Job, send: Send<Event>) async throws {
            let status = try await shell.run(job.command)
            send(.finished(job.id, exitStatus: status))
        }
    }

    /// Never waits: a metric, an in-memory write, a message handed to a queue. Runs inline.
    struct Metrics: SyncEffectHandler {
        let registry: Registry

        func handle(_ name: String, send: Send<Event>) throws {
            registry.increment(name)
        }
    }
    // end snippet
    let shell = Shell { command in if command == "false" { throw Unreachable() } else { 0 } }
    let registry = Registry()
    // snippet
    let router = EffectRouter<Effect, Event>()
        .route({ if case .run(let job) = $0 { job } else { nil } }, to: JobRunner(shell: shell))
        .route({ if case .count(let name) = $0 { name } else { nil } }, to: Metrics(registry: registry))
        .mapErrors { effect, error in .effectFailed("\(effect)", "\(error)") }
    // end snippet
    let loop = Loop(program: Program(first: First(state: Jobs()), update: Update(update)), effects: router)
    let running = Task { try await loop.run() }
    loop.send(.submitted(Job(id: 1, command: "true")))
    loop.send(.submitted(Job(id: 2, command: "false")))
    for await state in loop.states where state.finished[1] != nil && !state.failures.isEmpty { break }
    loop.stop()
    _ = try await running.value
    #expect(loop.state == Jobs(finished: [1: 0], failures: ["Unreachable()"]))
    #expect(registry.count(of: "submitted") == 2)
}

// A cart feature, shipped with its routes, and the app that embeds it.

enum Cart {
    struct State: Equatable, Sendable { var items: [String] = [] }
    enum Event: Equatable, Sendable {
        case add(String)
        case saved(String)
    }
    enum Effect: Equatable, Sendable { case save(String) }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .add(let item):
            state.items.append(item)
            return [.save(item)]
        case .saved: return []
        }
    }

    static let router = EffectRouter<Effect, Event>()
        .route(
            { if case .save(let item) = $0 { item } else { nil } },
            to: ClosureSyncEffectHandler { item, send in send(.saved(item)) }
        )

    static let feature = Feature(update: Update(update), effects: router)
}

enum App {
    struct State: Equatable, Sendable {
        var cart = Cart.State()
        var saved: [String] = []
    }
    enum Event: Equatable, Sendable {
        case cart(Cart.Event)
    }
    enum Effect: Equatable, Sendable {
        case cart(Cart.Effect)
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        if case .cart(.saved(let item)) = event { state.saved.append(item) }
        return []
    }

    static let router = EffectRouter<Effect, Event>()
}

@Test func anEmbeddedFeatureBringsItsRoutes() async throws {
    let first = First<App.State, App.Effect>(state: App.State())
    // snippet
    let app = Feature<App.State, App.Event, App.Effect>.combine(
        Feature(update: Update(App.update), effects: App.router),
        Cart.feature.embedded(
            state: \.cart,
            event: { if case .cart(let event) = $0 { event } else { nil } },
            embedEvent: App.Event.cart,
            effect: App.Effect.cart,
            extractEffect: { if case .cart(let effect) = $0 { effect } else { nil } }
        )
    )
    let loop = Loop(program: Program(first: first, update: app.update), effects: app.effects)
    // end snippet
    let running = Task { try await loop.run() }
    loop.send(.cart(.add("book")))
    for await state in loop.states where state.saved == ["book"] { break }
    loop.stop()
    _ = try await running.value
    #expect(loop.state == App.State(cart: Cart.State(items: ["book"]), saved: ["book"]))
}

/// A search box's effects, each with its lifecycle.
enum Search {
    struct State: Equatable, Sendable { var text = "" }
    enum Event: Equatable, Sendable { case searched(String) }

    // snippet
    enum Effect: ManagedEffect, Equatable {
        case search(String)
        case cancelSearch
        case run(Job)
        case log(String)

        var lifecycle: EffectLifecycle {
            switch self {
            case .search: .latest("search", timeout: .seconds(2))
            case .cancelSearch: .cancel("search")
            case .run(let job): .serial("job-\(job.id)", timeout: job.timeout)
            case .log: .concurrent()
            }
        }
    }
    // end snippet

    static let update = Update<State, Event, Effect> { state, event in
        switch event {
        case .searched(let text): [.search(text)]
        }
    }
}

/// Effects that wait for time.
enum Timed: ManagedEffect {
    case search(String)
    case refreshPrices
    case remind(String, after: Duration)

    var lifecycle: EffectLifecycle {
        switch self {
        // snippet
        case .search: .debounce("search", for: .milliseconds(300))
        case .refreshPrices: .throttle("prices", every: .seconds(5))
        case .remind(let user, let after): .delayed(by: after, key: "remind-\(user)")
        // end snippet
        }
    }
}

@Test func delaysQuietPeriodsAndIntervalsAreValues() {
    #expect(Timed.search("swift").lifecycle == .debounce("search", for: .milliseconds(300)))
    #expect(Timed.remind("ada", after: .seconds(60)).lifecycle == .delayed(by: .seconds(60), key: "remind-ada"))
}

extension Search {
    @Test static func theLifecycleIsAValue() {
        let state = State()
        // snippet
        #expect(update(state, .searched("swift")) == Next(state: state, effects: [.search("swift")]))
        #expect(Effect.search("swift").lifecycle == .latest("search", timeout: .seconds(2)))
        // end snippet
    }
}

// A shop answering quotes and orders.

struct Item: Hashable, Sendable { var name: String }
typealias Price = Int
typealias OrderID = Int
struct Order: Hashable, Sendable {
    var id: OrderID
    var item: Item
}
struct Receipt: Hashable, Sendable { var order: OrderID }

/// The payment provider's client: charges an order.
final class PaymentsClient: Sendable {
    private let charged = Mutex<[OrderID]>([])
    func charge(_ order: Order) async throws { charged.withLock { $0.append(order.id) } }
}

struct Payments: EffectHandler {
    let client: PaymentsClient
    func handle(_ order: Order, send: Send<Event>) async throws {
        try await client.charge(order)
        send(.charged(order.id))
    }
}

let client = PaymentsClient()

// snippet
enum Event: Sendable {
    case quote(Item, replyTo: ReplyTo<Price>)
    case order(Order, replyTo: ReplyTo<Receipt>)
    case charged(OrderID)
}
enum Effect: Sendable {
    case price(Reply<Price>)
    case receipt(Reply<Receipt>)
    case charge(Order)
}

let router = EffectRouter<Effect, Event>()
    .replies { if case .price(let reply) = $0 { reply } else { nil } }
    .replies { if case .receipt(let reply) = $0 { reply } else { nil } }
    .route({ if case .charge(let order) = $0 { order } else { nil } }, to: Payments(client: client))
// end snippet

/// The shop's update: a book costs 12; an order is answered once it is charged.
struct Shop: Sendable {
    var waiting: [OrderID: ReplyTo<Receipt>] = [:]

    static func update(_ state: inout Shop, _ event: Event) -> [Effect] {
        switch event {
        case .quote(_, let replyTo): return [.price(replyTo.reply(12))]
        case .order(let order, let replyTo):
            state.waiting[order.id] = replyTo
            return [.charge(order)]
        case .charged(let id):
            guard let replyTo = state.waiting.removeValue(forKey: id) else { return [] }
            return [.receipt(replyTo.reply(Receipt(order: id)))]
        }
    }
}

/// An account holding 5.
enum Account {
    struct State: Sendable { var balance = 5 }
    enum Event: Sendable { case balance(replyTo: ReplyTo<Int>) }
    enum Effect: Sendable { case answer(Reply<Int>) }
    static let program = Program(
        first: First(state: State()),
        update: Update<State, Event, Effect> { state, event in
            switch event {
            case .balance(let replyTo): [.answer(replyTo.reply(state.balance))]
            }
        }
    )
}

@Test func aRequestGetsTheAnswerTheUpdateDecides() async throws {
    let loop = Loop(program: Program(first: First(state: Shop()), update: Update(Shop.update)), effects: router)
    let accounts = LoopGroup<String, Account.State, Account.Event, Account.Effect>(
        program: { _ in Account.program },
        effects: EffectRouter().replies { if case .answer(let reply) = $0 { reply } else { nil } }
    )
    let (item, accountID) = (Item(name: "book"), "account-17")
    let runningLoop = Task { try await loop.run() }
    let runningGroup = Task { try await accounts.run() }
    // Both run before the requests, so the 2 s timeout measures the answer, not the tasks' start.
    #expect(await loop.waitUntilRunning())
    #expect(await accounts.waitUntilRunning())
    // snippet
    let price = try await loop.request(timeout: .seconds(2)) { .quote(item, replyTo: $0) }
    let balance = try await accounts.request(to: accountID) { .balance(replyTo: $0) }  // an entity of a LoopGroup
    // end snippet
    let receipt = try await loop.request { .order(Order(id: 7, item: item), replyTo: $0) }
    #expect((price, balance, receipt) == (12, 5, Receipt(order: 7)))
    loop.stop()
    accounts.stop()
    _ = try await (runningLoop.value, runningGroup.value)
}
