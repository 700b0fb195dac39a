import LoopCore
import Testing

@Suite struct CompositionTests {
    typealias State = App.State

    @Test func combineRunsEachUpdateInTurnAndConcatenatesEffectsInOrder() {
        let first = Update<Int, Int, String> { state, event in
            state += event
            return ["first saw \(state)"]
        }
        let second = Update<Int, Int, String> { state, event in
            state *= 10
            return ["second saw \(state)", "second again"]
        }
        #expect(
            Update.combine(first, second)(1, 2)
                == Next(state: 30, effects: ["first saw 3", "second saw 30", "second again"])
        )
        #expect(
            Update.combine(second, first)(1, 2)
                == Next(state: 12, effects: ["second saw 10", "second again", "first saw 12"])
        )
        #expect(Update<Int, Int, String>.combine([])(7, 1) == Next(state: 7))
    }

    @Test func embedAppliesChildEventsToTheChildStateAndLiftsItsEffects() {
        let next = App.main(State(), .main(.add(4)))
        #expect(
            next
                == Next(
                    state: State(main: Counter.State(count: 4, history: [4])),
                    effects: [.main(.log("4")), .main(.persist(4))]
                )
        )
    }

    @Test func embedIgnoresEventsOfOtherChildren() {
        let state = State(main: Counter.State(count: 1))
        #expect(App.main(state, .scratch(.increment)) == Next(state: state))
        #expect(App.main(state, .openScratch) == Next(state: state))
    }

    @Test func combinedParentSeesTheChildsNewState() {
        let next = App.update(State(), .main(.increment))
        #expect(next.state.main.count == 1)
        #expect(next.state.audit == ["main increment -> 1"])
        #expect(next.effects == [.main(.log("1")), .audited("main")])
    }

    @Test func optionalChildRunsWhilePresent() {
        let open = App.update(State(), .openScratch).state
        let next = App.update(open, .scratch(.add(2)))
        #expect(next.state.scratch == Counter.State(count: 2, history: [2]))
        #expect(next.effects == [.scratch(.log("2")), .scratch(.persist(2))])
    }

    @Test func optionalChildEventWhileAbsentChangesNothingAndIsReported() {
        let next = App.update(State(), .scratch(.increment))
        #expect(next == Next(state: State(), effects: [.unknown(.scratch(.increment))]))
    }

    @Test func optionalChildWithoutAbsentHandlerIgnoresTheEvent() {
        let quiet = Update<State, App.Event, App.Effect>.embedIfPresent(
            App.counter,
            state: \.scratch,
            event: { if case .scratch(let event) = $0 { event } else { nil } },
            effect: App.Effect.scratch
        )
        #expect(quiet(State(), .scratch(.increment)) == Next(state: State()))
    }

    @Test func keyedChildrenReceiveOnlyTheirOwnEvents() {
        var state = State()
        for id in ["a", "b"] { _ = App.update(&state, .openSession(id)) }
        let effects = App.update(&state, .session("b", .add(3)))
        #expect(state.sessions == ["a": Counter.State(), "b": Counter.State(count: 3, history: [3])])
        #expect(effects == [.session("b", .log("3")), .session("b", .persist(3))])
    }

    @Test func keyedChildEventForAnUnknownIdChangesNothingAndIsReported() {
        var state = State()
        _ = App.update(&state, .openSession("a"))
        let next = App.update(state, .session("zzz", .increment))
        #expect(next == Next(state: state, effects: [.unknown(.session("zzz", .increment))]))
    }

    @Test func keyedChildWithoutAbsentHandlerIgnoresTheEvent() {
        let quiet = Update<State, App.Event, App.Effect>.embedEach(
            App.counter,
            states: \.sessions,
            event: { if case .session(let id, let event) = $0 { (id, event) } else { nil } },
            effect: App.Effect.session
        )
        #expect(quiet(State(), .session("x", .increment)) == Next(state: State()))
    }
}
