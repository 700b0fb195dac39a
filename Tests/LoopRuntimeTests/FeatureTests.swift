import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

/// A feature ships its update with its routes; a parent embeds two of them and its own with one call
/// each, and never writes a route of theirs.
enum Tally {
    struct State: Equatable, Sendable {
        var total = 0
        var saved: [Int] = []
    }

    enum Event: Equatable, Sendable {
        case add(Int)
        case saved(Int)
    }

    enum Effect: Equatable, Sendable, ManagedEffect {
        case save(Int)

        var lifecycle: EffectLifecycle { .serial("save") }
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .add(let amount):
            state.total += amount
            return [.save(state.total)]
        case .saved(let total):
            state.saved.append(total)
            return []
        }
    }

    static let feature = Feature(
        update: Update(update),
        effects: EffectRouter<Effect, Event>()
            .route(
                { if case .save(let total) = $0 { total } else { nil } },
                to: ClosureEffectHandler { total, send in send(.saved(total)) }
            )
    )
}

enum Panel {
    struct State: Equatable, Sendable {
        var left = Tally.State()
        var right = Tally.State()
        var notes: [String] = []
    }

    enum Event: Equatable, Sendable {
        case left(Tally.Event)
        case right(Tally.Event)
        case note(String)
    }

    enum Effect: Equatable, Sendable {
        case left(Tally.Effect)
        case right(Tally.Effect)
        case print(String)
    }

    static func feature(printed: @escaping @Sendable (String) -> Void) -> Feature<State, Event, Effect> {
        Feature.combine(
            Feature(
                update: Update { state, event in
                    guard case .note(let text) = event else { return [] }
                    state.notes.append(text)
                    return [.print(text)]
                },
                effects: EffectRouter<Effect, Event>()
                    .route(
                        { if case .print(let text) = $0 { text } else { nil } },
                        to: ClosureSyncEffectHandler { text, _ in printed(text) }
                    )
            ),
            Tally.feature.embedded(
                state: \.left,
                event: { if case .left(let event) = $0 { event } else { nil } },
                embedEvent: Event.left,
                effect: Effect.left,
                extractEffect: { if case .left(let effect) = $0 { effect } else { nil } }
            ),
            Tally.feature.embedded(
                state: \.right,
                event: { if case .right(let event) = $0 { event } else { nil } },
                embedEvent: Event.right,
                effect: Effect.right,
                extractEffect: { if case .right(let effect) = $0 { effect } else { nil } }
            )
        )
    }
}

@Suite struct FeatureTests {
    @Test func theCombinedUpdateIsStillAValue() {
        let update = Panel.feature(printed: { _ in }).update
        var state = Panel.State()
        #expect(update(&state, .left(.add(2))) == [.left(.save(2))])
        #expect(update(&state, .note("hi")) == [.print("hi")])
        #expect(state == Panel.State(left: Tally.State(total: 2), notes: ["hi"]))
    }

    @Test func embeddedFeaturesBringTheirHandlersAndLifecyclesAlong() async throws {
        let printed = Locked<[String]>([])
        let feature = Panel.feature { text in printed.withLock { $0.append(text) } }
        #expect(feature.effects.lifecycle(of: .left(.save(1))) == .serial("save"))
        #expect(feature.effects.lifecycle(of: .print("x")) == .concurrent())
        let loop = Loop(
            program: Program(first: First(state: Panel.State()), update: feature.update),
            effects: feature.effects
        )
        let running = Task { try await loop.run() }
        _ = await loop.waitUntilRunning()
        loop.send(.left(.add(2)))
        loop.send(.right(.add(3)))
        loop.send(.left(.add(4)))
        loop.send(.note("done"))
        var answered = loop.states.scoped { $0.left.saved.count + $0.right.saved.count }.makeAsyncIterator()
        while let count = await answered.next(), count < 3 {}
        #expect(loop.state.left == Tally.State(total: 6, saved: [2, 6]))
        #expect(loop.state.right == Tally.State(total: 3, saved: [3]))
        #expect(printed.withLock { $0 } == ["done"])
        loop.stop()
        _ = try await running.value
    }
}
