import LoopCore
import Testing

/// The example in README.md, kept here so the README stays true.
enum ReadmeWorker {
    struct State: Equatable, Sendable {
        var pending: [String] = []
        var running: String?
    }
    enum Event: Equatable, Sendable {
        case submitted(String)
        case finished(String)
    }
    enum Effect: Equatable, Sendable {
        case start(String)
        case notify(String)
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .submitted(let job) where state.running == nil:
            state.running = job
            return [.start(job)]
        case .submitted(let job):
            state.pending.append(job)
            return []
        case .finished(let job):
            state.running = state.pending.isEmpty ? nil : state.pending.removeFirst()
            return [.notify(job)] + (state.running.map { [.start($0)] } ?? [])
        }
    }
}

@Suite struct ReadmeExampleTests {
    typealias State = ReadmeWorker.State
    let worker = Update(ReadmeWorker.update)

    @Test func finishingAJobStartsTheNext() {
        #expect(
            worker(State(pending: ["b"], running: "a"), .finished("a"))
                == Next(state: State(pending: [], running: "b"), effects: [.notify("a"), .start("b")])
        )
    }

    @Test func aJobSubmittedWhileBusyWaits() {
        #expect(worker(State(running: "a"), .submitted("b")) == Next(state: State(pending: ["b"], running: "a")))
    }
}
