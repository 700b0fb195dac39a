import LoopCore
import Testing

@Suite struct NextTests {
    typealias State = Counter.State
    typealias Effect = Counter.Effect

    @Test func factoriesBuildTheSameValueAsTheInitializer() {
        let state = State(count: 2, history: [1, 2])
        #expect(Next<State, Effect>.next(state, effects: [.log("2")]) == Next(state: state, effects: [.log("2")]))
        #expect(Next<State, Effect>.next(state) == Next(state: state, effects: []))
        #expect(
            Next<State, Effect>.dispatch([.persist(2)], keeping: state) == Next(state: state, effects: [.persist(2)])
        )
        #expect(Next<State, Effect>.noChange(state) == Next(state: state, effects: []))
    }

    @Test func equalityComparesStateAndEffectsInOrder() {
        let state = State(count: 1)
        #expect(
            Next<State, Effect>.next(state, effects: [.log("a"), .log("b")])
                != .next(state, effects: [.log("b"), .log("a")])
        )
        #expect(Next<State, Effect>.next(state) != .next(State(count: 2)))
        #expect(Next<State, Effect>.next(state).hasEffects == false)
        #expect(Next<State, Effect>.next(state, effects: [.log("a")]).hasEffects)
    }

    @Test func equalValuesHashAlike() {
        let one = Next<State, Effect>.next(State(count: 1), effects: [.persist(1)])
        let same = Next<State, Effect>(state: State(count: 1), effects: [.persist(1)])
        let other = Next<State, Effect>.next(State(count: 1), effects: [.persist(2)])
        #expect(Set([one, same, other]).count == 2)
    }

    @Test func descriptionShowsStateAndEffects() {
        let next = Next<Int, String>.next(3, effects: ["save"])
        #expect(next.description == #"Next(state: 3, effects: ["save"])"#)
        #expect(First<Int, String>.first(0, effects: ["load"]).description == #"First(state: 0, effects: ["load"])"#)
    }

    @Test func firstHoldsStartStateAndEffects() {
        let first = First<State, Effect>.first(State(count: 5), effects: [.log("start")])
        #expect(first == First(state: State(count: 5), effects: [.log("start")]))
        #expect(first != First(state: State(count: 5)))
        #expect(Set([first, first]).count == 1)
    }
}
