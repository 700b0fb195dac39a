import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

@Suite struct LoopGroupTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>
    typealias Group = LoopGroup<String, Jobs.State, Jobs.Event, Jobs.Effect>

    func group(gates: Gates = Gates(), recorder: Recorded) -> Group {
        Group(
            program: { id in Program(first: First(state: Jobs.State(log: ["born \(id)"])), update: Update(Jobs.update))
            },
            effects: Jobs.router(gates: gates),
            observer: recorder
        )
    }

    func running(_ group: Group, _ body: () async throws -> Void) async throws -> LoopReport {
        try await withThrowingTaskGroup(of: LoopReport.self) { tasks in
            tasks.addTask { try await group.run() }
            while !group.isRunning { await Task.yield() }
            try await body()
            group.stop()
            return try await tasks.next() ?? LoopReport()
        }
    }

    @Test func eventsReachTheLoopOfTheirIdCreatedOnFirstUse() async throws {
        let recorder = Recorded()
        let group = group(recorder: recorder)
        #expect(group.count == 0)
        let report = try await running(group) {
            group.send(.append(1), to: "a")
            group.send(.append(2), to: "b")
            group.send(.append(3), to: "a")
            await recorder.wait(for: "three events") {
                $0.count { if case .processed = $0 { true } else { false } } == 3
            }
            #expect(group.count == 2)
            #expect(Set(group.ids) == ["a", "b"])
            #expect(group.state(of: "a") == Jobs.State(log: ["born a"], items: [1, 3]))
            #expect(group.state(of: "b") == Jobs.State(log: ["born b"], items: [2]))
            #expect(group.state(of: "c") == nil)
        }
        #expect(report.eventsProcessed == 3)
        #expect(report.ending == .drained)
    }

    @Test func eachLoopsEffectsReportBackToThatLoop() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let group = group(gates: gates, recorder: recorder)
        _ = try await running(group) {
            group.send(.run([.job("x", .serial("k"))]), to: "a")
            group.send(.run([.job("y", .serial("k"))]), to: "b")
            await waitUntil { gates.arrivals("x") == 1 && gates.arrivals("y") == 1 }
            gates.open("x")
            gates.open("y")
            await recorder.wait(for: .processed(.finished("y")))
            await recorder.wait(for: .processed(.finished("x")))
        }
        #expect(group.state(of: "a")?.log == ["born a", "finished x"])
        #expect(group.state(of: "b")?.log == ["born b", "finished y"])
    }

    @Test func eventsSentBeforeRunAreProcessedWhenItStarts() async throws {
        let recorder = Recorded()
        let group = group(recorder: recorder)
        group.send(.note("early"), to: "a")
        #expect(group.state(of: "a")?.log == ["born a"])
        _ = try await running(group) {
            await recorder.wait(for: .processed(.note("early")))
        }
        #expect(group.state(of: "a")?.log == ["born a", "early"])
    }

    @Test func aRemovedLoopIsReleasedOnceItsEffectsEndWhileItsIdStartsAfresh() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let group = group(gates: gates, recorder: recorder)
        let report = try await running(group) {
            group.send(.run([.job("work", .concurrent())]), to: "gone")
            await waitUntil { gates.arrivals("work") == 1 }
            group.remove("gone")
            #expect(group.count == 0)
            // The next event for the id starts a fresh loop at once.
            #expect(group.send(.note("again"), to: "gone") == .accepted)
            #expect(group.state(of: "gone")?.log == ["born gone", "again"])
            // The old loop's effect still reports to the old loop, which is then released.
            gates.open("work")
            await recorder.wait(for: .processed(.finished("work")))
            await waitUntil { group.report.eventsProcessed == 3 && group.report.effectsInFlight == 0 }
            #expect(group.state(of: "gone")?.log == ["born gone", "again"])
        }
        #expect(report.effectsCompleted == 1)
        #expect(report.eventsRejected == 0)
        #expect(report.eventsProcessed == 3)
    }

    /// Counts deinitialised canaries: a loop's update captures one, so it dies with the loop.
    final class Canary: Sendable {
        static let alive = Atomic<Int>(0)
        init() { Self.alive.add(1, ordering: .relaxed) }
        deinit { Self.alive.subtract(1, ordering: .relaxed) }
    }

    @Test func removedLoopsAreDeallocated() async throws {
        let group = Group(
            program: { _ in
                let canary = Canary()
                return Program(
                    first: First(state: Jobs.State()),
                    update: Update { state, event in
                        _ = canary
                        return Jobs.update(&state, event)
                    }
                )
            },
            effects: Jobs.router(gates: Gates())
        )
        let before = Canary.alive.load(ordering: .relaxed)
        _ = try await running(group) {
            for index in 0..<1_000 { group.send(.run([.echo("\(index)")]), to: "loop-\(index)") }
            #expect(Canary.alive.load(ordering: .relaxed) == before + 1_000)
            for index in 0..<1_000 { group.remove("loop-\(index)") }
            await waitUntil { group.count == 0 }
        }
        #expect(Canary.alive.load(ordering: .relaxed) == before)
        #expect(group.report.eventsProcessed == 2_000)
    }

    @Test func aStandaloneLoopIsDeallocatedAfterItStops() async throws {
        weak var released: Loop<Jobs.State, Jobs.Event, Jobs.Effect>?
        do {
            let loop = Jobs.loop(recorder: Recorded())
            released = loop
            _ = try await StressTests.run(loop) { loop.send(.run([.echo("x"), .job("j", .concurrent("k"))])) }
        }
        // Released once the tasks that ran its effects are torn down, which may trail run()'s return.
        await waitUntil { released == nil }
        #expect(released == nil)
    }

    @Test func stoppingTheGroupStopsEveryLoopAndRejectsNewIds() async throws {
        let recorder = Recorded()
        let group = group(recorder: recorder)
        let run = Task { try await group.run() }
        await waitUntil { group.isRunning }
        for index in 0..<10 { group.send(.append(index), to: "\(index)") }
        group.stop()
        #expect(group.send(.append(99), to: "new") == .rejected(.stopping))
        let report = try await run.value
        #expect(report.eventsProcessed == 10)
        #expect(report.ending == .drained)
        #expect(group.send(.append(99), to: "0") == .rejected(.stopped))
        await #expect(throws: LoopError.alreadyStopped) { try await group.run() }
    }

    @Test func aSecondStopWithAShorterGracePeriodBringsTheDeadlineForward() async throws {
        let (gates, clock) = (Gates(), ManualClock())
        let group = Group(
            program: { _ in Program(first: First(state: Jobs.State()), update: Update(Jobs.update)) },
            effects: Jobs.router(gates: gates),
            clock: clock
        )
        let run = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        group.send(.run([.job("stuck", .concurrent())]), to: "a")
        await waitUntil { gates.arrivals("stuck") == 1 }
        group.stop(gracePeriod: .seconds(3_600))
        await clock.sleepers(atLeast: 1)
        group.stop(gracePeriod: .seconds(1))
        await clock.sleepers(atLeast: 2)
        clock.advance(by: .seconds(1))
        let report = try await run.value
        #expect(report.ending == .deadlineExceeded)
        #expect(report.effectsAbandoned == 1)
    }
}
