import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

@Suite struct OrderingTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    @Test func eventsAreProcessedInArrivalOrder() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        let report = try await running(loop) {
            for index in 0..<100 { loop.send(.append(index)) }
        }
        #expect(loop.state.items == Array(0..<100))
        #expect(report.eventsProcessed == 100)
    }

    @Test func eventsSentBeforeRunAreProcessedWhenItStarts() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        #expect(loop.send(.note("early")) == .accepted)
        #expect(loop.state.log == [])
        _ = try await running(loop) {
            await recorder.wait(for: .processed(.note("early")))
        }
        #expect(loop.state.log == ["early"])
    }

    @Test func eventsSentWhileProcessingAreQueuedNotReentered() async throws {
        let recorder = Recorded()
        // A synchronous handler sends an event back while the loop is still dispatching the effects of
        // the event that asked for it: it must be processed after, not inside.
        let loop = Jobs.loop(recorder: recorder)
        _ = try await running(loop) {
            loop.send(.run([.echo("a"), .echo("b")]))
            loop.send(.note("c"))
            await recorder.wait(for: .processed(.note("c")))
        }
        #expect(loop.state.log == ["a", "b", "c"])
        let processed = recorder.entries.compactMap { if case .processed(let event) = $0 { event } else { nil } }
        #expect(processed == [.run([.echo("a"), .echo("b")]), .note("a"), .note("b"), .note("c")])
    }

    @Test func anObserverThatSendsIsQueuedNotReentered() async throws {
        let depth = Atomic<Int>(0)
        let deepest = Atomic<Int>(0)
        let holder = Locked<Loop<Jobs.State, Jobs.Event, Jobs.Effect>?>(nil)
        let observer = ClosureLoopObserver<Jobs.Event, Jobs.Effect> { activity in
            guard case .eventProcessed(.append(let value), _, _, _, _, _) = activity, value < 50 else { return }
            let now = depth.add(1, ordering: .relaxed).newValue
            deepest.max(now, ordering: .relaxed)
            holder.withLock { $0 }?.send(.append(value + 1))
            depth.subtract(1, ordering: .relaxed)
        }
        let loop = Loop(program: Jobs.program, effects: Jobs.router(gates: Gates()), observer: observer)
        holder.withLock { $0 = loop }
        _ = try await running(loop) {
            loop.send(.append(0))
        }
        #expect(loop.state.items == Array(0...50))
        #expect(deepest.load(ordering: .relaxed) == 1)
        holder.withLock { $0 = nil }  // the observer holds the loop through `holder`: break the cycle
    }

    @Test func effectsOfOneEventStartInTheOrderListed() async throws {
        let recorder = Recorded()
        let gates = Gates()
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let effects: [Jobs.Effect] = [
            .echo("1"), .job("2", .concurrent()), .echo("3"), .job("4", .concurrent()), .echo("5"),
        ]
        _ = try await running(loop) {
            loop.send(.run(effects))
            gates.open("2")
            gates.open("4")
            await recorder.wait(for: "both jobs finished") {
                $0.contains(.processed(.finished("2"))) && $0.contains(.processed(.finished("4")))
            }
        }
        let started = recorder.entries.compactMap { if case .started(let effect) = $0 { effect } else { nil } }
        #expect(started == effects)
    }

    @Test func theStartEffectsRunWhenTheLoopStarts() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder, first: [.echo("boot")])
        _ = try await running(loop) {
            await recorder.wait(for: .processed(.note("boot")))
        }
        #expect(loop.state.log == ["boot"])
    }
}
