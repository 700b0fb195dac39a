import LoopCore

/// A small program used across the core's tests: a counter that logs and can be reset.
enum Counter {
    struct State: Equatable, Hashable, Sendable {
        var count = 0
        var history: [Int] = []
    }

    enum Event: Equatable, Sendable {
        case increment
        case add(Int)
        case reset
        case ignored
    }

    enum Effect: Equatable, Hashable, Sendable {
        case log(String)
        case persist(Int)
    }

    /// The in-place form.
    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .increment:
            state.count += 1
            state.history.append(state.count)
            return [.log("\(state.count)")]
        case .add(let amount):
            state.count += amount
            state.history.append(state.count)
            return [.log("\(state.count)"), .persist(state.count)]
        case .reset:
            state = State()
            return [.persist(0)]
        case .ignored:
            return []
        }
    }

    /// The same logic in the pure value form: mutate the handed-over state, return it with the effects.
    static let next: @Sendable (consuming State, Event) -> Next<State, Effect> = { (state: consuming State, event) in
        switch event {
        case .increment:
            state.count += 1
            state.history.append(state.count)
            return Next(state: state, effects: [.log("\(state.count)")])
        case .add(let amount):
            state.count += amount
            state.history.append(state.count)
            return Next(state: state, effects: [.log("\(state.count)"), .persist(state.count)])
        case .reset:
            return Next(state: State(), effects: [.persist(0)])
        case .ignored:
            return Next(state: state)
        }
    }
}
