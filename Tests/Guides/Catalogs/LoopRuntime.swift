// The code of Sources/LoopRuntime/LoopRuntime.docc/LoopRuntime.md (see LoopCore.swift).

import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime

/// The LoopRuntime page: a job queue that shuts down on SIGTERM.
enum RuntimePage {
    struct Job: Equatable, Sendable { var name: String }
    struct State: Equatable, Sendable { var queued: [Job] = [] }
    enum Event: Equatable, Sendable {
        case submitted(Job)
        case shutdown
    }
    enum Effect: Equatable, Sendable { case stop }

    /// Compiled, not run: it waits for SIGTERM.
    static func run(
        program: Program<State, Event, Effect>,
        router: EffectRouter<Effect, Event>,
        job: Job
    ) async throws {
        // snippet
        let loop = Loop(program: program, effects: router, sources: [SignalSource([.terminate]) { _ in .shutdown }])
        loop.send(.submitted(job))  // from any thread; never waits
        try await loop.run()  // until stop(gracePeriod:) or task cancellation
        // end snippet
    }
}
