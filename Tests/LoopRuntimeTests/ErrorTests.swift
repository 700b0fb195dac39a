import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

@Suite struct ErrorTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    @Test func aThrowingHandlerIsMappedToAnEventAndTheLoopGoesOn() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        let report = try await running(loop) {
            loop.send(.run([.fail("x")]))
            await recorder.wait(for: .processed(.failed("x: boom x")))
            loop.send(.note("still running"))
        }
        #expect(loop.state.log == ["failed x: boom x", "still running"])
        #expect(recorder.entries.contains(.failed(.fail("x"), "boom x", mappedTo: .failed("x: boom x"))))
        #expect(report.effectsFailed == 1)
    }

    @Test func anUnmappedErrorReachesTheObserver() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder, mapErrors: false)
        let report = try await running(loop) {
            loop.send(.run([.fail("x"), .failInline("y")]))
            await recorder.wait(for: .failed(.fail("x"), "boom x", mappedTo: nil))
            await recorder.wait(for: .failed(.failInline("y"), "boom y", mappedTo: nil))
        }
        #expect(loop.state.log == [])
        #expect(report.effectsFailed == 2)
    }

    @Test func aThrowingSynchronousHandlerIsMappedToo() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        _ = try await running(loop) {
            loop.send(.run([.failInline("z"), .echo("after")]))
            await recorder.wait(for: .processed(.note("after")))
        }
        #expect(loop.state.log == ["failed z: boom z", "after"])
    }

    @Test func anEffectNoRouteAcceptsIsReportedNotLost() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        let report = try await running(loop) {
            loop.send(.run([.orphan, .echo("next")]))
            await recorder.wait(for: .processed(.note("next")))
        }
        #expect(recorder.entries.contains(.failed(.orphan, "no route handles this effect", mappedTo: nil)))
        #expect(report.effectsFailed == 1)
    }

    @Test func runningALoopTwiceIsAClearError() async throws {
        let loop = Jobs.loop(recorder: Recorded())
        _ = try await running(loop) {
            await #expect(throws: LoopError.alreadyRunning) { try await loop.run() }
        }
        await #expect(throws: LoopError.alreadyStopped) { try await loop.run() }
    }

    @Test func sendAfterStopIsRejectedWithAReason() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        _ = try await running(loop) {}
        #expect(loop.send(.note("late")) == .rejected(.stopped))
        #expect(recorder.entries.contains(.rejected(.note("late"), .stopped)))
        #expect(Delivery.rejected(.stopped).description == "rejected: the loop has stopped")
        #expect(loop.report.eventsRejected == 1)
    }

    /// Bug 2: a loop stopped before it ran used to report `.drained` with its event still queued.
    @Test func stopBeforeRunStopsForGoodAndCountsTheQueuedEventsDropped() async throws {
        let recorder = Recorded()
        let loop = Jobs.loop(recorder: recorder)
        loop.send(.note("queued"))
        loop.stop()
        #expect(loop.send(.note("late")) == .rejected(.stopped))
        await #expect(throws: LoopError.alreadyStopped) { try await loop.run() }
        let report = loop.report
        #expect(report.ending == .neverStarted)
        #expect(report.eventsDropped == 1)
        #expect(report.eventsQueued == 0)
        #expect(recorder.entries == [.eventDropped(.note("queued")), .stopped, .rejected(.note("late"), .stopped)])
        #expect(await loop.waitUntilRunning() == false)
    }
}
