import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import Testing

/// The "Numbers" program: inputs from outside, feedback from its effect handler, outputs to a stream.
enum Numbers {
    struct State: Equatable, Sendable {
        var total = 0
    }

    /// What the outside world may send.
    enum Input: Equatable, Sendable {
        case add(Int)
    }

    /// What only the program's handlers send.
    enum Feedback: Equatable, Sendable {
        case checked(Int, isPrime: Bool)
    }

    /// What the outside world observes.
    enum Output: Equatable, Sendable {
        case primeReached(Int)
    }

    enum Effect: Equatable, Sendable {
        case check(Int)
        case announce(Output)
    }

    typealias Event = Message<Input, Feedback>

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .input(.add(let value)):
            state.total += value
            return [.check(state.total)]
        case .feedback(.checked(let total, let isPrime)):
            // A late answer about an older total announces nothing.
            return isPrime && total == state.total ? [.announce(.primeReached(total))] : []
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))

    struct PrimeChecker: EffectHandler {
        func handle(_ value: Int, send: Send<Feedback>) async throws {
            let isPrime = value > 1 && !(2..<max(2, value)).contains { value % $0 == 0 }
            send(.checked(value, isPrime: isPrime))
        }
    }

    static func router() -> EffectRouter<Effect, Feedback> {
        EffectRouter().route({ if case .check(let value) = $0 { value } else { nil } }, to: PrimeChecker())
    }

    static func output(_ effect: Effect) -> Output? {
        if case .announce(let output) = effect { output } else { nil }
    }
}

@Suite struct LoopStoreTests {
    @Test func theUpdateIsPureOverInputsAndFeedback() {
        let next = Numbers.program.replay([.input(.add(3)), .feedback(.checked(3, isPrime: true))])
        #expect(next == Next(state: Numbers.State(total: 3), effects: [.check(3), .announce(.primeReached(3))]))
    }

    @Test func inputsGoInFeedbackComesBackAndOutputsArriveOnTheStream() async throws {
        let store = LoopStore(program: Numbers.program, effects: Numbers.router(), output: Numbers.output)
        let run = Task { try await store.run() }
        _ = await store.waitUntilRunning()
        var outputs = store.outputs.makeAsyncIterator()
        #expect(store.send(.add(2)) == .accepted)
        #expect(await outputs.next() == .primeReached(2))
        store.send(.add(2))
        store.send(.add(1))
        #expect(await outputs.next() == .primeReached(5))
        store.stop()
        let report = try await run.value
        #expect(await outputs.next() == nil)
        #expect(store.state.total == 5)
        #expect(report.ending == .drained)
        // Three inputs and three answers from the checker; the announcements are outputs, not events.
        #expect(report.eventsProcessed == 6)
    }

    @Test func aSecondRunIsRefusedAndTheFirstRunKeepsItsOutputs() async throws {
        let store = LoopStore(program: Numbers.program, effects: Numbers.router(), output: Numbers.output)
        let run = Task { try await store.run() }
        _ = await store.waitUntilRunning()
        await #expect(throws: LoopError.alreadyRunning) { try await store.run() }
        var outputs = store.outputs.makeAsyncIterator()
        store.send(.add(7))
        #expect(await outputs.next() == .primeReached(7))
        store.stop()
        _ = try await run.value
    }

    @Test func inputSourcesFeedInputs() async throws {
        let store = LoopStore(
            program: Numbers.program,
            effects: Numbers.router(),
            output: Numbers.output,
            sources: [AsyncSequenceSource([Numbers.Input.add(3)].async)]
        )
        let run = Task { try await store.run() }
        var outputs = store.outputs.makeAsyncIterator()
        #expect(await outputs.next() == .primeReached(3))
        store.stop()
        _ = try await run.value
    }
}

extension Array where Element: Sendable {
    /// The elements as an async sequence, for a source in a test.
    fileprivate var async: AsyncStream<Element> {
        AsyncStream { continuation in
            for element in self { continuation.yield(element) }
            continuation.finish()
        }
    }
}
