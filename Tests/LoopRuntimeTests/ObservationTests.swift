import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

/// What observers receive, and what a program can ask of its own loop, without wiring after creation.
@Suite struct ObservationTests {
    enum Event: Equatable, Sendable {
        case add(Int)
        case ping
        case pong
        case quit
    }

    enum Effect: Equatable, Sendable {
        case answer
        case stop(Duration)
    }

    static func update(_ total: inout Int, _ event: Event) -> [Effect] {
        switch event {
        case .add(let value):
            total += value
            return []
        case .ping: return [.answer]
        case .pong: return []
        case .quit: return [.stop(.seconds(5))]
        }
    }

    static let program = Program(first: First(state: 0), update: Update(update))

    static let router = EffectRouter<Effect, Event>()
        .route({ $0 == .answer ? () : nil }, to: ClosureEffectHandler { _, send in send(.pong) })
        .stopLoop(on: { if case .stop(let gracePeriod) = $0 { gracePeriod } else { nil } })

    /// Records the state after each processed event, read through the activity.
    final class StateLog: LoopStateObserver, Sendable {
        let states = Mutex<[Int]>([])

        func observe(_ activity: LoopActivity<Event, Effect>, state: () -> Int) {
            guard case .eventProcessed = activity else { return }
            let current = state()
            states.withLock { $0.append(current) }
        }

        func observe(_ activity: LoopActivity<Event, Effect>) {}
    }

    @Test func aStateObserverGetsTheStateAfterEachEventWithNoWiring() async throws {
        let log = StateLog()
        let loop = Loop(program: Self.program, effects: Self.router, observer: log)
        _ = try await running(loop) {
            for value in 1...5 { loop.send(.add(value)) }
        }
        #expect(log.states.withLock { $0 } == [1, 3, 6, 10, 15])
    }

    /// Records each processed event with the effects it produced and the state right after it.
    final class StepLog: LoopStateObserver, Sendable {
        let steps = Mutex<[(Event, [Effect], Int)]>([])

        func observe(_ activity: LoopActivity<Event, Effect>, state: () -> Int) {
            guard case .eventProcessed(let event, _, _, _, let effects, _) = activity else { return }
            let current = state()
            steps.withLock { $0.append((event, effects, current)) }
        }

        func observe(_ activity: LoopActivity<Event, Effect>) {}
    }

    @Test func anObserverSeesTheEffectsEachEventProducedAndTheStateAfterIt() async throws {
        let log = StepLog()
        let loop = Loop(program: Self.program, effects: Self.router, observer: log)
        _ = try await running(loop) {
            loop.send(.add(2))
            loop.send(.ping)
        }
        let steps = log.steps.withLock { $0 }
        #expect(steps.map(\.0) == [.add(2), .ping, .pong])
        #expect(steps.map(\.1) == [[], [.answer], []])
        #expect(steps.map(\.2) == [2, 2, 2])
    }

    @Test func processedEventsSayWhereTheyCameFrom() async throws {
        let recorder = RecordingObserver<Event, Effect>()
        let loop = Loop(program: Self.program, effects: Self.router, observer: recorder)
        _ = try await running(loop) {
            loop.send(.ping)
            await recorder.wait(for: .processed(.pong))
        }
        #expect(recorder.origins == [.outside, .effect])
    }

    @Test func severalObserversEachSeeEverything() async throws {
        let (first, second) = (RecordingObserver<Event, Effect>(), RecordingObserver<Event, Effect>())
        let loop = Loop(program: Self.program, effects: Self.router, observer: MulticastLoopObserver([first, second]))
        _ = try await running(loop) { loop.send(.add(1)) }
        #expect(first.entries == second.entries)
        #expect(first.entries == [.processed(.add(1)), .stopping, .stopped])
    }

    @Test func aProgramStopsItsOwnLoopWithAnEffect() async throws {
        let recorder = RecordingObserver<Event, Effect>()
        let loop = Loop(program: Self.program, effects: Self.router, observer: recorder)
        let run = Task { try await loop.run() }
        _ = await loop.waitUntilRunning()
        loop.send(.quit)
        let report = try await run.value
        #expect(report.ending == .drained)
        #expect(
            recorder.entries == [
                .processed(.quit), .started(.stop(.seconds(5))), .stopping, .completed(.stop(.seconds(5))), .stopped,
            ]
        )
    }

    @Test func aGroupObserverLearnsTheEntityOfEveryActivity() async throws {
        let seen = Mutex<[String]>([])
        let group = LoopGroup<String, Int, Event, Effect>(
            program: { _ in Self.program },
            effects: Self.router,
            observer: ClosureLoopGroupObserver { activity, entity in
                guard case .eventProcessed(let event, _, _, _, _, _) = activity else { return }
                seen.withLock { $0.append("\(entity ?? "-"): \(event)") }
            }
        )
        let run = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        group.send(.add(1), to: "a")
        group.send(.add(2), to: "b")
        group.stop()
        _ = try await run.value
        #expect(Set(seen.withLock { $0 }) == ["a: add(1)", "b: add(2)"])
    }

    @Test func aGroupLoopThatStopsItselfLeavesTheGroupAndItsIdStartsAfresh() async throws {
        let group = LoopGroup<String, Int, Event, Effect>(program: { _ in Self.program }, effects: Self.router)
        let run = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        group.send(.add(5), to: "a")
        group.send(.quit, to: "a")
        // The sender processed `quit` itself, so the loop left the group before `send` returned.
        #expect(group.count == 0)
        #expect(group.send(.add(1), to: "a") == .accepted)
        #expect(group.state(of: "a") == 1)
        group.stop()
        let report = try await run.value
        #expect(report.eventsProcessed == 3 && report.ending == .drained)
    }
}
