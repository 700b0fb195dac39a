// The code of README.md. Each region between `// snippet` and `// end snippet` is one code block of the
// README, in order, as it shows it (`make lint` compares them; `swift .ci/guide-check.swift --write`
// copies them in); `// snippet imports A B` shows the block opening with `import A` and `import B`, which
// the file has at its top. The README's two `Package.swift` fragments are not here: the check evaluates
// each in a manifest of its own. What sits outside the regions is what a block needs around it.

import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

// snippet imports LoopCore Testing
struct State: Equatable, Sendable {
    var pending: [String] = []
    var running: String?
}
enum Event: Equatable, Sendable {
    case submitted(String)
    case finished(String)
}
enum Effect: Equatable, Sendable {
    case start(String)
    case notify(String)
}

func update(_ state: inout State, _ event: Event) -> [Effect] {
    switch event {
    case .submitted(let job) where state.running == nil:
        state.running = job
        return [.start(job)]
    case .submitted(let job):
        state.pending.append(job)
        return []
    case .finished(let job):
        state.running = state.pending.isEmpty ? nil : state.pending.removeFirst()
        return [.notify(job)] + (state.running.map { [.start($0)] } ?? [])
    }
}

@Test func finishingAJobStartsTheNext() {
    #expect(
        Update(update)(State(pending: ["b"], running: "a"), .finished("a"))
            == Next(state: State(pending: [], running: "b"), effects: [.notify("a"), .start("b")])
    )
}
// end snippet

@Test func aJobSubmittedWhileBusyWaits() {
    #expect(Update(update)(State(running: "a"), .submitted("b")) == Next(state: State(pending: ["b"], running: "a")))
}

/// What the service's handlers talk to: a shell that starts jobs, a client that tells someone.
protocol Shell: Sendable { func start(_ job: String) async throws }
protocol Client: Sendable { func notify(_ job: String) async throws }

struct JobStarter: EffectHandler {
    let shell: any Shell
    func handle(_ job: String, send: Send<Event>) async throws {
        try await shell.start(job)
        send(.finished(job))
    }
}

struct Notifier: EffectHandler {
    let client: any Client
    func handle(_ job: String, send: Send<Event>) async throws { try await client.notify(job) }
}

/// Compiled, not run: the loop runs until it is stopped, and nothing here stops it.
func runTheUpdateInAService(shell: any Shell, client: any Client) async throws {
    // snippet imports EffectHandlers LoopRuntime
    let loop = Loop(
        program: Program(first: First(state: State()), update: Update(update)),
        effects: EffectRouter<Effect, Event>()
            .route({ if case .start(let job) = $0 { job } else { nil } }, to: JobStarter(shell: shell))
            .route({ if case .notify(let job) = $0 { job } else { nil } }, to: Notifier(client: client))
    )
    loop.send(.submitted("backup"))  // from any thread; never waits
    try await loop.run()  // until loop.stop(gracePeriod:) or cancellation
    // end snippet
}
