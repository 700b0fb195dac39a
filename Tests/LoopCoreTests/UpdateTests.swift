import LoopCore
import Testing

@Suite struct UpdateTests {
    typealias State = Counter.State

    static let forms: [(String, Update<State, Counter.Event, Counter.Effect>)] = [
        ("in place", Update(Counter.update)),
        ("pure value", Update(next: Counter.next)),
    ]

    @Test(arguments: forms)
    func valueFormReturnsNextStateAndEffects(form: String, update: Update<State, Counter.Event, Counter.Effect>) {
        #expect(update(State(count: 1), .increment) == Next(state: State(count: 2, history: [2]), effects: [.log("2")]))
        #expect(
            update(State(count: 1), .add(4))
                == Next(state: State(count: 5, history: [5]), effects: [.log("5"), .persist(5)])
        )
        #expect(update(State(count: 9), .ignored) == Next(state: State(count: 9)))
    }

    @Test(arguments: forms)
    func inPlaceFormMutatesTheCallersState(form: String, update: Update<State, Counter.Event, Counter.Effect>) {
        var state = State(count: 1)
        let effects = update(&state, .add(2))
        #expect(state == State(count: 3, history: [3]))
        #expect(effects == [.log("3"), .persist(3)])
    }

    @Test func valueFormLeavesTheCallersCopyUntouched() {
        let update = Update(Counter.update)
        let before = State(count: 1)
        _ = update(before, .increment)
        #expect(before == State(count: 1))
    }

    @Test func machineAppliesEventsInOrderAndKeepsTheState() {
        var machine = Machine(state: State(), update: Update(Counter.update))
        #expect(machine.process(.increment) == [.log("1")])
        #expect(machine.process(.add(10)) == [.log("11"), .persist(11)])
        #expect(machine.state == State(count: 11, history: [1, 11]))
        #expect(machine.process(.reset) == [.persist(0)])
        #expect(machine.finish() == State())
    }
}
