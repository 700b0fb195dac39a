// The code of Docs/Runtime.md. Each region between `// snippet` and `// end snippet` is one code block of
// the guide, in order, as the guide shows it (`make lint` compares them; `swift .ci/guide-check.swift
// --write` copies them in). What sits outside the regions is what a block needs around it to compile.

import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import Testing

/// Counts ticks, and stops its own loop at the third.
enum Ticks {
    struct State: Equatable, Sendable { var ticks = 0 }
    enum Event: Equatable, Sendable { case tick }
    enum Effect: Equatable, Sendable { case stop }

    static let program = Program(
        first: First(state: State()),
        update: Update<State, Event, Effect> { state, _ in
            state.ticks += 1
            return state.ticks == 3 ? [.stop] : []
        }
    )
    static let router = EffectRouter<Effect, Event>().stopLoop { $0 == .stop ? .seconds(1) : nil }
    static let sources: [any EventSource<Event>] = [
        ClosureEventSource { send in for _ in 0..<3 { send(.tick) } }
    ]
}

@Test func aLoopRunsUntilItStops() async throws {
    let (program, router, sources) = (Ticks.program, Ticks.router, Ticks.sources)
    // snippet imports LoopRuntime
    let loop = Loop(program: program, effects: router, sources: sources)
    let report = try await loop.run()  // in your service's task
    // end snippet
    #expect(report.eventsProcessed == 3)
    #expect(loop.state == Ticks.State(ticks: 3))
}

/// One connection's session: how many connections and jobs it has seen.
typealias SessionID = Int

enum Session {
    struct State: Equatable, Sendable {
        var connections = 0
        var runningCount = 0
    }
    enum Event: Equatable, Sendable {
        case connected
        case started
    }
    enum Effect: Equatable, Sendable { case greet }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .connected:
            state.connections += 1
            return [.greet]
        case .started:
            state.runningCount += 1
            return []
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))
    static func program(_ id: SessionID) -> Program<State, Event, Effect> { program }

    /// What the handlers use.
    struct Services: Sendable {
        var greet: @Sendable () -> Void
    }

    static func router(_ services: Services) -> EffectRouter<Effect, Event> {
        EffectRouter().route({ $0 == .greet ? () : nil }, to: ClosureSyncEffectHandler { _, _ in services.greet() })
    }
}

@Test func aStartedLoopRunsWithoutATask() async throws {
    let router = Session.router(Session.Services(greet: {}))
    // snippet
    let loop = Loop(program: Session.program, effects: router)
    try loop.start()  // returns at once; the loop runs until stopped
    loop.send(.connected)  // processed on this thread, as with run()
    loop.stop()  // when the connection closes
    let report = await loop.waitUntilStopped()  // if anyone needs the report
    // end snippet
    #expect(report.eventsProcessed == 1)
    #expect(loop.state == Session.State(connections: 1))
}

/// Compiled, not run: the group runs until it is stopped, and nothing here stops it.
func runTheSessions(services: Session.Services, id: SessionID) async throws {
    // snippet
    let sessions = LoopGroup<SessionID, Session.State, Session.Event, Session.Effect>(
        program: { id in Session.program(id) },
        effects: Session.router(services)
    )
    sessions.send(.connected, to: id)  // creates the loop for `id` on its first event
    sessions.remove(id)  // stops it gracefully; released once its effects end
    try await sessions.run()
    // end snippet
}

@Test func aProjectionOfTheStatesEndsWithTheLoop() async throws {
    let loop = Loop(program: Session.program, effects: Session.router(Session.Services(greet: {})))
    try loop.start()
    loop.send(.started)
    loop.send(.started)
    loop.stop()
    // snippet
    for await running in loop.states.scoped({ $0.runningCount }) {
        print("running: \(running)")  // once per change, never once per event
    }
    // end snippet
    #expect(loop.state.runningCount == 2)
}
