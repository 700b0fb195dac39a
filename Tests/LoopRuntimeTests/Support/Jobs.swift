import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting

/// A test domain whose effects carry their own lifecycle, so each test picks the policy it checks.
enum Jobs {
    struct State: Equatable, Sendable {
        var log: [String] = []
        var items: [Int] = []
    }

    enum Event: Equatable, Sendable {
        case note(String)
        case append(Int)
        case run([Effect])
        case finished(String)
        case failed(String)
    }

    enum Effect: Equatable, Sendable, ManagedEffect {
        /// Waits at gate `name`, then sends `.finished(name)`.
        case job(String, EffectLifecycle)
        /// Throws `Boom(name)`.
        case fail(String)
        /// Runs inline: sends `.note(name)` back.
        case echo(String)
        /// Runs inline and throws.
        case failInline(String)
        /// No route handles it.
        case orphan

        var lifecycle: EffectLifecycle {
            if case .job(_, let lifecycle) = self { lifecycle } else { .concurrent() }
        }
    }

    struct Boom: Error, CustomStringConvertible {
        var name: String
        var description: String { "boom \(name)" }
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .note(let text):
            state.log.append(text)
            return []
        case .append(let value):
            state.items.append(value)
            return []
        case .run(let effects):
            return effects
        case .finished(let name):
            state.log.append("finished \(name)")
            return []
        case .failed(let name):
            state.log.append("failed \(name)")
            return []
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))

    static func router(gates: Gates, mapErrors: Bool = true) -> EffectRouter<Effect, Event> {
        let router = EffectRouter<Effect, Event>()
            .route(
                { if case .job(let name, _) = $0 { name } else { nil } },
                to: ClosureEffectHandler { name, send in
                    try await gates.pass(name)
                    send(.finished(name))
                }
            )
            .route(
                { if case .fail(let name) = $0 { name } else { nil } },
                to: ClosureEffectHandler { name, _ in
                    throw Boom(name: name)
                }
            )
            .route(
                { if case .echo(let name) = $0 { name } else { nil } },
                to: ClosureSyncEffectHandler { name, send in
                    send(.note(name))
                }
            )
            .route(
                { if case .failInline(let name) = $0 { name } else { nil } },
                to: ClosureSyncEffectHandler { name, _ in
                    throw Boom(name: name)
                }
            )
        guard mapErrors else { return router }
        return router.mapErrors { effect, error in
            switch effect {
            case .job(let name, _), .fail(let name), .failInline(let name): .failed("\(name): \(error)")
            default: nil
            }
        }
    }

    static func loop(
        gates: Gates = Gates(),
        recorder: Recorder<Event, Effect>,
        mapErrors: Bool = true,
        inbox: InboxPolicy = .unbounded,
        clock: any Clock<Duration> = ContinuousClock(),
        first: [Effect] = []
    ) -> Loop<State, Event, Effect> {
        Loop(
            program: Program(first: First(state: State(), effects: first), update: Update(update)),
            effects: router(gates: gates, mapErrors: mapErrors),
            inbox: inbox,
            observer: recorder,
            clock: clock
        )
    }
}

/// Runs `loop` in a child task for the duration of `body`, then stops it and returns its report.
func running<State, Event, Effect>(
    _ loop: Loop<State, Event, Effect>,
    gracePeriod: Duration = .seconds(30),
    _ body: () async throws -> Void
) async throws -> LoopReport {
    try await withThrowingTaskGroup(of: LoopReport.self) { group in
        group.addTask { try await loop.run() }
        while !loop.isRunning { await Task.yield() }
        try await body()
        loop.stop(gracePeriod: gracePeriod)
        return try await group.next() ?? LoopReport()
    }
}
