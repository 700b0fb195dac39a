import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

@Suite struct ShutdownTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    @Test func gracefulShutdownLetsInFlightEffectsFinishAndProcessesTheirEvents() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.run([.job("a", .concurrent())]))
        await waitUntil { gates.arrivals("a") == 1 }
        loop.stop(gracePeriod: .seconds(60))
        #expect(loop.send(.note("from outside")) == .rejected(.stopping))
        gates.open("a")
        let report = try await run.value
        #expect(loop.state.log == ["finished a"])
        #expect(report.ending == .drained)
        #expect(report.effectsCompleted == 1)
        #expect(report.eventsRejected == 1)
        #expect(report.eventsProcessed == 2)
        #expect(report.effectsInFlight == 0)
        #expect(report.eventsQueued == 0)
    }

    @Test func shutdownCancelsWhatIsStillRunningAtTheDeadline() async throws {
        let (recorder, gates, clock) = (Recorded(), Gates(), ManualClock())
        let loop = Jobs.loop(gates: gates, recorder: recorder, clock: clock)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.run([.job("stuck", .concurrent()), .job("queued", .serial("k")), .job("waiting", .serial("k"))]))
        await waitUntil { gates.arrivals("stuck") == 1 && gates.arrivals("queued") == 1 }
        loop.stop(gracePeriod: .seconds(10))
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(10))
        let report = try await run.value
        #expect(report.ending == .deadlineExceeded)
        // The two running effects are cancelled and abandoned: run() returns at the deadline without
        // waiting for their handlers. The one queued behind "queued" never starts.
        #expect(report.effectsAbandoned == 2)
        #expect(report.effectsCancelled == 1)
        #expect(report.effectsStarted == 2)
        #expect(report.effectsInFlight == 0)
        #expect(gates.arrivals("waiting") == 0)
        #expect(recorder.entries.last == .stopped)
    }

    @Test func shutdownWithNothingInFlightIsImmediate() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder, clock: ManualClock())
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.note("one"))
        loop.stop(gracePeriod: .seconds(3_600))
        let report = try await run.value
        #expect(report.ending == .drained)
        #expect(report.eventsProcessed == 1)
    }

    @Test func cancellingTheRunTaskStopsAtOnce() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        loop.send(.run([.job("forever", .concurrent()), .job("keyed", .concurrent("k"))]))
        await waitUntil { gates.arrivals("forever") == 1 && gates.arrivals("keyed") == 1 }
        run.cancel()
        let report = try await run.value
        #expect(report.ending == .cancelled)
        #expect(report.effectsAbandoned == 2)
        #expect(report.effectsInFlight == 0)
        #expect(loop.send(.note("late")) == .rejected(.stopped))
        #expect(loop.isRunning == false)
    }

    @Test func theStateStreamSeesChangesAndEndsWithTheLoop() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        var iterator = loop.states.makeAsyncIterator()
        #expect(await iterator.next() == Jobs.State())
        loop.send(.append(1))
        #expect(await iterator.next() == Jobs.State(items: [1]))
        // A slow consumer skips to the latest state instead of buffering.
        for value in 2...100 { loop.send(.append(value)) }
        #expect(await iterator.next() == Jobs.State(items: Array(1...100)))
        let waiting = Task { [iterator] in
            var iterator = iterator
            return await iterator.next()
        }
        loop.stop()
        _ = try await run.value
        #expect(await waiting.value == nil)
    }

    @Test func theStateStreamDeliversTheLatestStateToAParkedConsumer() async throws {
        let loop = Jobs.loop(recorder: Recorded())
        let run = Task { try await loop.run() }
        await waitUntil { loop.isRunning }
        let consumer = Task {
            var seen: [Jobs.State] = []
            for await state in loop.states {
                seen.append(state)
                if state.items.count == 1 { break }
            }
            return seen
        }
        loop.send(.append(7))
        #expect(await consumer.value.last == Jobs.State(items: [7]))
        loop.stop()
        _ = try await run.value
    }
}
