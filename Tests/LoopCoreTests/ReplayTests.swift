import LoopCore
import Testing

@Suite struct ReplayTests {
    typealias State = Counter.State
    let update = Update(Counter.update)

    @Test func replayFoldsEventsAfterTheStartEffects() {
        let first = First<State, Counter.Effect>(state: State(count: 10), effects: [.log("start")])
        let replayed = update.replay(from: first, events: [.increment, .ignored, .add(5)])
        #expect(
            replayed
                == Next(
                    state: State(count: 16, history: [11, 16]),
                    effects: [.log("start"), .log("11"), .log("16"), .persist(16)]
                )
        )
    }

    @Test func replayEqualsApplyingEachEventByHand() {
        let events: [Counter.Event] = [.add(3), .increment, .reset, .increment, .add(-2), .ignored]
        var state = State()
        var effects: [Counter.Effect] = []
        for event in events {
            let next = update(state, event)
            state = next.state
            effects += next.effects
        }
        #expect(update.replay(from: First(state: State()), events: events) == Next(state: state, effects: effects))
    }

    @Test func replayOfNoEventsIsTheStart() {
        let first = First<State, Counter.Effect>(state: State(count: 3), effects: [.persist(3)])
        #expect(update.replay(from: first, events: []) == Next(state: State(count: 3), effects: [.persist(3)]))
    }

    @Test func replayIsDeterministic() {
        let events = (0..<1_000).map { $0.isMultiple(of: 7) ? Counter.Event.reset : .add($0) }
        let program = Program(first: First(state: State()), update: update)
        #expect(program.replay(events) == program.replay(events))
        #expect(program.replay(events).state.count == (995..<1_000).reduce(0, +))
    }
}
