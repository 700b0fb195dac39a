import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct SourceTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    func loop(_ sources: [any EventSource<Jobs.Event>], recorder: Recorded) -> Loop<Jobs.State, Jobs.Event, Jobs.Effect>
    {
        Loop(program: Jobs.program, effects: Jobs.router(gates: Gates()), sources: sources, observer: recorder)
    }

    @Test func anAsyncSequenceFeedsItsElementsInOrder() async throws {
        let recorder = Recorded()
        let (stream, continuation) = AsyncStream<Jobs.Event>.makeStream()
        let loop = loop([AsyncSequenceSource(stream)], recorder: recorder)
        _ = try await running(loop) {
            for value in 0..<10 { continuation.yield(.append(value)) }
            continuation.finish()
            await recorder.wait(for: .sourceFinished)
        }
        #expect(loop.state.items == Array(0..<10))
    }

    @Test func aTimerTicksOnlyWhenItsClockAdvances() async throws {
        let recorder = Recorded()
        let clock = ManualClock()
        let loop = loop([TimerSource(every: .seconds(5), clock: clock, event: .note("tick"))], recorder: recorder)
        _ = try await running(loop) {
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(4))
            #expect(loop.state.log == [])
            clock.advance(by: .seconds(1))
            await recorder.wait(for: .processed(.note("tick")))
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(5))
            await recorder.wait(for: .processed(.note("tick")), count: 2)
        }
        #expect(loop.state.log == ["tick", "tick"])
    }

    @Test func aTimerWithANonPositiveIntervalFailsAndIsReported() async throws {
        let recorder = Recorded()
        let loop = loop([TimerSource(every: .zero, clock: ManualClock(), event: .note("never"))], recorder: recorder)
        _ = try await running(loop) {
            await recorder.wait(for: .sourceFailed("nonPositiveInterval(0.0 seconds)"))
        }
    }

    @Test func aThrowingSourceIsReportedAndTheLoopKeepsRunning() async throws {
        struct Broken: Error, CustomStringConvertible { var description: String { "broken" } }
        let recorder = Recorded()
        let failing = ClosureEventSource<Jobs.Event> { send in
            send(.note("before"))
            throw Broken()
        }
        let loop = loop([failing], recorder: recorder)
        _ = try await running(loop) {
            await recorder.wait(for: .sourceFailed("broken"))
            #expect(loop.send(.note("after")) == .accepted)
        }
        #expect(loop.state.log == ["before", "after"])
    }

    @Test func mergedAndMappedSourcesFeedTheLoop() async throws {
        let recorder = Recorded()
        let numbers = AsyncSequenceSource(
            AsyncStream<Int> { continuation in
                for value in 1...3 { continuation.yield(value) }
                continuation.finish()
            }
        )
        let words = AsyncSequenceSource(
            AsyncStream<String> { continuation in
                continuation.yield("hello")
                continuation.finish()
            }
        )
        let merged = MergedSource<Jobs.Event>(numbers.map { .append($0) }, words.map { .note($0) })
        let loop = loop([merged], recorder: recorder)
        _ = try await running(loop) {
            await recorder.wait(for: .sourceFinished)
        }
        #expect(loop.state.items == [1, 2, 3])
        #expect(loop.state.log == ["hello"])
    }

    @Test func sourcesAreCancelledWhenTheLoopStops() async throws {
        let recorder = Recorded()
        let clock = ManualClock()
        let loop = loop([TimerSource(every: .seconds(1), clock: clock, event: .note("tick"))], recorder: recorder)
        _ = try await running(loop) {
            await clock.sleepers(atLeast: 1)
        }
        #expect(clock.sleeperCount == 0)
        #expect(!recorder.entries.contains { if case .sourceFailed = $0 { true } else { false } })
    }

    @Test func linesFromAFileDescriptorBecomeEvents() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (reading, writing) = (descriptors[0], descriptors[1])
        defer { close(reading) }
        let recorder = Recorded()
        let lines = LineSource<Jobs.Event>(fileDescriptor: reading, end: .note("<end>")) { .note($0) }
        let loop = loop([lines], recorder: recorder)
        _ = try await running(loop) {
            var bytes = Array("first\nsecond\r\nthi".utf8) + [0xFF] + Array("rd\nunterminated".utf8)
            #expect(write(writing, &bytes, bytes.count) == bytes.count)
            close(writing)
            await recorder.wait(for: .processed(.note("<end>")))
        }
        #expect(loop.state.log == ["first", "second", "thi\u{FFFD}rd", "unterminated", "<end>"])
    }

    @Test func signalsBecomeEvents() async throws {
        let recorder = Recorded()
        let signals = SignalSource<Jobs.Event>([.hangup]) { .note("\($0)") }
        let loop = loop([signals], recorder: recorder)
        // Ignore SIGHUP, as the source itself does, so a delivery before its watcher is installed is
        // harmless; then deliver until the watcher reports one.
        signal(SIGHUP, SIG_IGN)
        _ = try await running(loop) {
            await waitUntil("a SIGHUP event") {
                kill(getpid(), SIGHUP)
                return recorder.entries.contains(.processed(.note("SIGHUP")))
            }
        }
        #expect(loop.state.log.first == "SIGHUP")
    }
}
