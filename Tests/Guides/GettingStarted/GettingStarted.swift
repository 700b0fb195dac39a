// The code of Docs/GettingStarted.md. Each region between `// snippet` and `// end snippet` is one code
// block of the guide, in order, as the guide shows it (`make lint` compares them; `swift
// .ci/guide-check.swift --write` copies them into the guide); `// snippet imports A B` shows the block
// opening with `import A` and `import B`, which the file has at its top. What sits outside the regions
// is what a block needs around it to compile: the values a test uses, the parameters a fragment takes.

import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

// snippet imports LoopCore
struct Job: Identifiable, Equatable, Sendable {
    let id: Int
    var name: String
}

struct State: Equatable, Sendable {
    var queue: [Job] = []
    var running: [Job.ID: Job] = [:]
    var limit = 2
}

enum Event: Equatable, Sendable {
    case submitted(Job)
    case finished(Job.ID, exitStatus: Int32)
}

enum Effect: Equatable, Sendable {
    case run(Job)
    case announce(Job.ID, succeeded: Bool)
}
// end snippet

// snippet
extension State {
    var hasRoom: Bool { running.count < limit }
}

func update(_ state: inout State, _ event: Event) -> [Effect] {
    switch event {
    case .submitted(let job) where state.hasRoom:
        state.running[job.id] = job
        return [.run(job)]
    case .submitted(let job):
        state.queue.append(job)
        return []
    case .finished(let id, let status):
        state.running[id] = nil
        var effects: [Effect] = [.announce(id, succeeded: status == 0)]
        if state.hasRoom, !state.queue.isEmpty {
            let next = state.queue.removeFirst()
            state.running[next.id] = next
            effects.append(.run(next))
        }
        return effects
    }
}
// end snippet

// snippet
let worker = Update(update)
let program = Program(first: First(state: State(), effects: []), update: worker)
// end snippet

@Test func theNextShapeWrapsAPureFunction() {
    // snippet
    let worker = Update<State, Event, Effect>(next: { (state: consuming State, event) in
        switch event {
        case .submitted(let job):
            state.queue.append(job)
            return Next(state: state)
        case .finished(let id, _):
            return Next(state: state, effects: [.announce(id, succeeded: true)])
        }
    })
    // end snippet
    #expect(worker(State(), .submitted(a)) == Next(state: State(queue: [a])))
    #expect(
        worker(State(), .finished(a.id, exitStatus: 0))
            == Next(state: State(), effects: [.announce(1, succeeded: true)])
    )
}

func theOneRule(_ state: inout State, _ job: Job) {
    // snippet
    // Don't: `copy` shares storage with `state`, so the append copies the whole array.
    var copy = state
    copy.queue.append(job)
    state = copy

    // Do: mutate the state you were given.
    state.queue.append(job)
    // end snippet
}

// snippet imports Testing
let (a, b, c) = (Job(id: 1, name: "a"), Job(id: 2, name: "b"), Job(id: 3, name: "c"))

@Test func finishedJobReportsAndStartsTheNextQueued() {
    let state = State(queue: [b], running: [a.id: a], limit: 1)
    #expect(
        worker(state, .finished(a.id, exitStatus: 0))
            == Next(
                state: State(queue: [], running: [b.id: b], limit: 1),
                effects: [.announce(a.id, succeeded: true), .run(b)]
            )
    )
}
// end snippet

// snippet imports LoopTesting
let spec = UpdateSpec(worker)

@Test func thirdJobWaitsForRoom() {
    spec.given(State(limit: 2))
        .when(.submitted(a), .submitted(b), .submitted(c))
        .then(state: State(queue: [c], running: [a.id: a, b.id: b], limit: 2), effects: [.run(a), .run(b)])
}
// end snippet

/// Three updates over the same state and event, for `combine`.
@Test func combinedUpdatesRunInOrder() {
    let metrics = Update<State, Event, Effect> { _, _ in [] }
    let scheduling = worker
    let audit = Update<State, Event, Effect> { _, event in
        if case .finished(let id, _) = event { [.announce(id, succeeded: false)] } else { [] }
    }
    // snippet
    let app = Update.combine(metrics, scheduling, audit)
    // end snippet
    #expect(app(State(), .submitted(a)) == Next(state: State(running: [a.id: a]), effects: [.run(a)]))
    // Both the scheduling and the audit answer a finished job: the effects come in the updates' order.
    #expect(
        app(State(running: [a.id: a]), .finished(a.id, exitStatus: 0))
            == Next(state: State(), effects: [.announce(a.id, succeeded: true), .announce(a.id, succeeded: false)])
    )
}

/// A feature of its own, and the application that embeds it.
enum Uploads {
    struct State: Equatable, Sendable { var count = 0 }
    enum Event: Equatable, Sendable { case uploaded }
    enum Effect: Equatable, Sendable { case thank }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        state.count += 1
        return [.thank]
    }
}

struct AppState: Equatable, Sendable { var uploads = Uploads.State() }
enum AppEvent: Equatable, Sendable { case uploads(Uploads.Event) }
enum AppEffect: Equatable, Sendable { case uploads(Uploads.Effect) }

@Test func anEmbeddedFeatureChangesItsPartOfTheState() {
    // snippet
    let uploads = Update<AppState, AppEvent, AppEffect>.embed(
        Update(Uploads.update),
        state: \.uploads,
        event: { if case .uploads(let event) = $0 { event } else { nil } },
        effect: AppEffect.uploads
    )
    // end snippet
    #expect(
        uploads(AppState(), .uploads(.uploaded))
            == Next(state: AppState(uploads: Uploads.State(count: 1)), effects: [.uploads(.thank)])
    )
}

// snippet
enum Numbers {
    struct State: Equatable, Sendable { var total = 0 }

    enum Input: Equatable, Sendable { case add(Int) }  // from clients
    enum Feedback: Equatable, Sendable { case checked(Int, isPrime: Bool) }  // from the checker
    enum Output: Equatable, Sendable { case primeReached(Int) }  // to the world

    enum Effect: Equatable, Sendable {
        case check(Int)
        case announce(Output)
    }

    typealias Event = Message<Input, Feedback>

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .input(.add(let value)):
            state.total += value
            return [.check(state.total)]
        case .feedback(.checked(let total, let isPrime)):
            // An answer about an older total announces nothing.
            return isPrime && total == state.total ? [.announce(.primeReached(total))] : []
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))
}
// end snippet

@Test func numbersAnnouncesAPrimeTotal() {
    // snippet
    #expect(
        Numbers.program.replay([.input(.add(3)), .feedback(.checked(3, isPrime: true))])
            == Next(state: Numbers.State(total: 3), effects: [.check(3), .announce(.primeReached(3))])
    )
    // end snippet
}

@Test func numbersRunsInAStore() async throws {
    // snippet imports EffectHandlers LoopRuntime
    struct PrimeChecker: EffectHandler {
        func handle(_ value: Int, send: Send<Numbers.Feedback>) async throws {
            send(.checked(value, isPrime: value > 1 && !(2..<max(2, value)).contains { value % $0 == 0 }))
        }
    }

    let store = LoopStore(
        program: Numbers.program,
        effects: EffectRouter().route({ if case .check(let value) = $0 { value } else { nil } }, to: PrimeChecker()),
        output: { if case .announce(let output) = $0 { output } else { nil } }
    )
    // end snippet
    // snippet
    let run = Task { try await store.run() }
    store.send(.add(2))
    for await output in store.outputs {
        print(output)  // primeReached(2)
        break
    }
    store.stop()
    _ = try await run.value  // the outputs stream ends here too
    // end snippet
    #expect(store.state == Numbers.State(total: 2))
}
