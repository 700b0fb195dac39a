import LoopCore
import Testing

@Suite struct NextTests {
    typealias State = Counter.State
    typealias Effect = Counter.Effect

    @Test func equalityComparesStateAndEffectsInOrder() {
        let state = State(count: 1)
        #expect(
            Next<State, Effect>(state: state, effects: [.log("a"), .log("b")])
                != Next(state: state, effects: [.log("b"), .log("a")])
        )
        #expect(Next<State, Effect>(state: state) != Next(state: State(count: 2)))
        #expect(Next<State, Effect>(state: state).hasEffects == false)
        #expect(Next<State, Effect>(state: state, effects: [.log("a")]).hasEffects)
    }

    @Test func equalValuesHashAlike() {
        let one = Next<State, Effect>(state: State(count: 1), effects: [.persist(1)])
        let same = Next<State, Effect>(state: State(count: 1), effects: [.persist(1)])
        let other = Next<State, Effect>(state: State(count: 1), effects: [.persist(2)])
        #expect(Set([one, same, other]).count == 2)
    }

    @Test func descriptionShowsStateAndEffects() {
        let next = Next<Int, String>(state: 3, effects: ["save"])
        #expect(next.description == #"Next(state: 3, effects: ["save"])"#)
        #expect(First<Int, String>(state: 0, effects: ["load"]).description == #"First(state: 0, effects: ["load"])"#)
    }

    @Test func firstHoldsStartStateAndEffects() {
        let first = First<State, Effect>(state: State(count: 5), effects: [.log("start")])
        #expect(first == First(state: State(count: 5), effects: [.log("start")]))
        #expect(first != First(state: State(count: 5)))
        #expect(Set([first, first]).count == 1)
    }
}
