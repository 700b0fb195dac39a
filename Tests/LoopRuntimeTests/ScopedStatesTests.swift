import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

@Suite struct ScopedStatesTests {
    struct State: Equatable, Sendable {
        var count = 0
        var note = ""
    }

    enum Event: Sendable {
        case increment
        case note(String)
    }

    static let program = Program<State, Event, Never>(
        first: First(state: State()),
        update: Update { state, event in
            switch event {
            case .increment: state.count += 1
            case .note(let text): state.note = text
            }
            return []
        }
    )

    /// Events that leave the projection as it was yield nothing.
    @Test func aProjectionYieldsOnlyWhenItChanges() async throws {
        let loop = Loop(program: Self.program, effects: EffectRouter())
        let running = Task { try await loop.run() }
        _ = await loop.waitUntilRunning()
        var counts = loop.states.scoped { $0.count }.makeAsyncIterator()
        #expect(await counts.next() == 0)
        loop.send(.note("a"))
        loop.send(.note("b"))
        loop.send(.increment)
        #expect(await counts.next() == 1)
        loop.send(.note("c"))
        loop.stop()
        #expect(await counts.next() == nil)
        _ = try await running.value
    }

    @Test func wholeStatesWithoutDuplicatesAndAnEntitysStates() async throws {
        let group = LoopGroup<String, State, Event, Never>(program: { _ in Self.program }, effects: EffectRouter())
        let running = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        #expect(group.states(of: "a") == nil)
        group.send(.note("x"), to: "a")
        var states = try #require(group.states(of: "a")).removingDuplicates().makeAsyncIterator()
        #expect(await states.next() == State(count: 0, note: "x"))
        group.send(.note("x"), to: "a")
        group.send(.increment, to: "a")
        #expect(await states.next() == State(count: 1, note: "x"))
        group.stop()
        #expect(await states.next() == nil)
        _ = try await running.value
    }
}
