import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing
import XCTest

/// A worker that runs one job at a time and reports the outcome.
enum Worker {
    struct State: Equatable, Sendable {
        var queue: [String] = []
        var running: String?
        var done: [String] = []
    }

    enum Event: Equatable, Sendable {
        case submitted(String)
        case finished(String, ok: Bool)
    }

    enum Effect: Equatable, Sendable, ManagedEffect {
        case run(String)
        case announce(String)

        var lifecycle: EffectLifecycle {
            switch self {
            case .run(let name): .serial("jobs", timeout: name == "slow" ? .seconds(3) : nil)
            case .announce: .concurrent()
            }
        }
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .submitted(let name) where state.running == nil:
            state.running = name
            return [.run(name)]
        case .submitted(let name):
            state.queue.append(name)
            return []
        case .finished(let name, let ok):
            state.done.append(ok ? name : "\(name) failed")
            state.running = state.queue.isEmpty ? nil : state.queue.removeFirst()
            return [.announce(name)] + (state.running.map { [.run($0)] } ?? [])
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))
}

@Suite struct HarnessTests {
    @Test func aJobIsRunAnsweredAndTheNextOneStarted() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("a"))
            await harness.send(.submitted("b"))
            harness.expectState(Worker.State(queue: ["b"], running: "a"))
            harness.expectEffects([.run("a")])
            await harness.answer(.run("a"), with: [.finished("a", ok: true)])
            harness.expectReceived([.finished("a", ok: true)])
            harness.expectState(Worker.State(queue: [], running: "b", done: ["a"]))
            harness.expectEffects([.announce("a"), .run("b")])
            await harness.answer(.announce("a"))
            await harness.answer(.run("b"), with: [.finished("b", ok: false)])
            harness.expectReceived([.finished("b", ok: false)])
            harness.expectEffects([.announce("b")])
            await harness.answer(.announce("b"))
            harness.expectState(Worker.State(done: ["a", "b failed"]))
        }
    }

    @Test func finishFailsWhileEffectsAreInFlightOrUnasserted() async throws {
        let harness = LoopHarness(Worker.program)
        let run = Task { try await harness.loop.run() }
        await waitUntilRunning(harness.loop)
        await harness.send(.submitted("a"))
        let result = await expectAsyncSpecFailure { await harness.finish() }
        #expect(
            result?.differences == [
                Difference(path: "effects in flight", expected: "none", actual: #"[.run("a")]"#),
                Difference(path: "effects started, never asserted", expected: "none", actual: #"[.run("a")]"#),
            ]
        )
        harness.expectEffects([.run("a")])
        await harness.answer(.run("a"), with: [.finished("a", ok: true)])
        let unasserted = await expectAsyncSpecFailure { await harness.finish() }
        #expect(
            unasserted?.differences.map(\.path) == [
                "effects in flight", "effects started, never asserted", "events received, never asserted",
            ]
        )
        harness.loop.stop(gracePeriod: .zero)
        _ = try await run.value
    }

    @Test func aWrongExpectationNamesTheDifference() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("a"))
            let result = expectSpecFailure { harness.expectState(Worker.State(running: "b")) }
            #expect(result?.differences == [Difference(path: "state.running", expected: #""b""#, actual: #""a""#)])
            harness.expectEffects([.run("a")])
            await harness.answer(.run("a"))
        }
    }

    @Test func timeoutsRunOnTheHarnessClock() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("slow"))
            harness.expectEffects([.run("slow")])
            await harness.clock.sleepers(atLeast: 1)
            harness.clock.advance(by: .seconds(3))
            while harness.loop.report.effectsTimedOut == 0 { await Task.yield() }
            #expect(harness.effects.cancelled == [.run("slow")])
            #expect(harness.effects.inFlight == [])
            #expect(harness.loop.report.effectsTimedOut == 1)
        }
    }
}

private func waitUntilRunning<S, E, F>(_ loop: Loop<S, E, F>) async {
    while !loop.isRunning { await Task.yield() }
}

/// The harness works from XCTest too.
final class HarnessXCTests: XCTestCase {
    func testAJobIsRunAndAnswered() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("a"))
            harness.expectEffects([.run("a")])
            await harness.answer(.run("a"), with: [.finished("a", ok: true)])
            harness.expectReceived([.finished("a", ok: true)])
            harness.expectEffects([.announce("a")])
            await harness.answer(.announce("a"))
            XCTAssertEqual(harness.state, Worker.State(done: ["a"]))
        }
    }
}
