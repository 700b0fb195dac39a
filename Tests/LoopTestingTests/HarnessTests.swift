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
            harness.expectState(Worker.State(running: "a"))
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
            harness.expectState(Worker.State(done: ["a", "b failed"]))
            harness.expectEffects([.announce("b")])
            await harness.answer(.announce("b"))
        }
    }

    @Test func finishFailsWhileEffectsAreInFlightOrUnasserted() async throws {
        let harness = LoopHarness(Worker.program)
        let run = Task { try await harness.loop.run() }
        await waitUntilRunning(harness.loop)
        await harness.send(.submitted("a"), skippingState: true)
        let result = await expectAsyncSpecFailure { await harness.finish() }
        #expect(
            result?.differences == [
                Difference(path: "effects in flight", expected: "none", actual: #"[.run("a")]"#),
                Difference(path: "effects started, never asserted", expected: "none", actual: #"[.run("a")]"#),
            ]
        )
        harness.expectEffects([.run("a")])
        await harness.answer(.run("a"), with: [.finished("a", ok: true)], skippingState: true)
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

    /// Steps are exhaustive about the state, as TCA's TestStore is: a change the test did not assert
    /// fails the next step, naming it; `skippingState` opts a step out.
    @Test func aStateChangeNobodyAssertedFailsTheNextStep() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("a"))
            await withKnownIssue {
                await harness.send(.submitted("b"))
            } matching: { issue in
                issue.comments.contains {
                    $0.rawValue.contains(#"state changed, never asserted.running: expected nil, actual "a""#)
                }
            }
            // Reported once: the next step does not repeat it.
            harness.expectState(Worker.State(queue: ["b"], running: "a"))
            harness.expectEffects([.run("a")])
            await harness.answer(.run("a"), with: [.finished("a", ok: true)], skippingState: true)
            harness.expectReceived([.finished("a", ok: true)])
            harness.expectEffects([.announce("a"), .run("b")])
            await harness.answer(.announce("a"))
            await harness.answer(.run("b"), with: [.finished("b", ok: true)])
            harness.expectReceived([.finished("b", ok: true)])
            harness.expectEffects([.announce("b")])
            harness.skipState()
            await harness.answer(.announce("b"))
        }
    }

    @Test func timeoutsRunOnTheHarnessClock() async throws {
        try await withLoopHarness(Worker.program) { harness in
            await harness.send(.submitted("slow"), skippingState: true)
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
            harness.expectState(Worker.State(running: "a"))
            harness.expectEffects([.run("a")])
            await harness.answer(.run("a"), with: [.finished("a", ok: true)])
            harness.expectReceived([.finished("a", ok: true)])
            harness.expectState(Worker.State(done: ["a"]))
            harness.expectEffects([.announce("a")])
            await harness.answer(.announce("a"))
            XCTAssertEqual(harness.state, Worker.State(done: ["a"]))
        }
    }
}
