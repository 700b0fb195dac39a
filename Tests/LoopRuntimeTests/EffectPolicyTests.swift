import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

@Suite struct EffectPolicyTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    func finished(_ name: String) -> Recorded.Entry { .processed(.finished(name)) }

    @Test func concurrentEffectsWithOneKeyRunSideBySide() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let report = try await running(loop) {
            loop.send(.run([.job("a", .concurrent("k")), .job("b", .concurrent("k"))]))
            await waitUntil { gates.arrivals("a") == 1 && gates.arrivals("b") == 1 }
            gates.open("a")
            gates.open("b")
            await recorder.wait(for: finished("b"))
            await recorder.wait(for: finished("a"))
        }
        #expect(report.effectsCompleted == 2)
    }

    @Test func serialEffectsRunOneAtATimeInOrder() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let report = try await running(loop) {
            loop.send(.run([.job("a", .serial("k")), .job("b", .serial("k")), .job("c", .serial("k"))]))
            await waitUntil { gates.arrivals("a") == 1 }
            #expect(gates.arrivals("b") == 0)
            gates.open("c")
            gates.open("b")
            #expect(gates.arrivals("b") == 0)
            gates.open("a")
            await recorder.wait(for: finished("c"))
        }
        #expect(loop.state.log == ["finished a", "finished b", "finished c"])
        #expect(report.effectsStarted == 3)
        #expect(report.effectsCompleted == 3)
    }

    @Test func serialKeysAreIndependent() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        _ = try await running(loop) {
            loop.send(.run([.job("a", .serial("k1")), .job("b", .serial("k2"))]))
            await waitUntil { gates.arrivals("a") == 1 && gates.arrivals("b") == 1 }
            gates.open("a")
            gates.open("b")
            await recorder.wait(for: finished("a"))
            await recorder.wait(for: finished("b"))
        }
    }

    @Test func latestCancelsTheRunningEffectAndTakesItsPlace() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let first = Jobs.Effect.job("a", .latest("search"))
        let report = try await running(loop) {
            loop.send(.run([first]))
            await waitUntil { gates.arrivals("a") == 1 }
            loop.send(.run([.job("b", .latest("search"))]))
            await recorder.wait(for: .cancelled(first))
            gates.open("b")
            await recorder.wait(for: finished("b"))
        }
        #expect(loop.state.log == ["finished b"])
        #expect(report.effectsCancelled == 1)
        #expect(report.effectsCompleted == 1)
    }

    @Test func latestCancelsQueuedEffectsBeforeTheyStart() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        _ = try await running(loop) {
            loop.send(.run([.job("a", .serial("k")), .job("b", .serial("k"))]))
            await waitUntil { gates.arrivals("a") == 1 }
            loop.send(.run([.job("c", .latest("k"))]))
            await recorder.wait(for: .cancelled(.job("a", .serial("k"))))
            await recorder.wait(for: .cancelled(.job("b", .serial("k"))))
            gates.open("c")
            await recorder.wait(for: finished("c"))
        }
        #expect(gates.arrivals("b") == 0)
        #expect(loop.state.log == ["finished c"])
    }

    @Test func dropIfRunningDropsWhileOneWithTheKeyIsInFlight() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let second = Jobs.Effect.job("b", .dropIfRunning("refresh"))
        let report = try await running(loop) {
            loop.send(.run([.job("a", .dropIfRunning("refresh")), second]))
            await recorder.wait(for: .effectDropped(second))
            gates.open("a")
            await recorder.wait(for: finished("a"))
            loop.send(.run([.job("c", .dropIfRunning("refresh"))]))
            gates.open("c")
            await recorder.wait(for: finished("c"))
        }
        #expect(gates.arrivals("b") == 0)
        #expect(report.effectsDropped == 1)
        #expect(report.effectsCompleted == 2)
    }

    @Test func cancelStopsRunningEffectsOfTheKey() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let upload = Jobs.Effect.job("upload", .concurrent("uploads"))
        let other = Jobs.Effect.job("other", .concurrent("others"))
        let report = try await running(loop) {
            loop.send(.run([upload, other]))
            await waitUntil { gates.arrivals("upload") == 1 && gates.arrivals("other") == 1 }
            loop.send(.run([.job("-", .cancel("uploads"))]))
            await recorder.wait(for: .cancelled(upload))
            gates.open("other")
            await recorder.wait(for: finished("other"))
        }
        #expect(loop.state.log == ["finished other"])
        #expect(report.effectsCancelled == 1)
    }

    @Test func cancelReachesEffectsQueuedAndNotYetStarted() async throws {
        let (recorder, gates) = (Recorded(), Gates())
        let loop = Jobs.loop(gates: gates, recorder: recorder)
        let queued = Jobs.Effect.job("b", .serial("k"))
        let report = try await running(loop) {
            loop.send(.run([.job("a", .serial("k")), queued]))
            await waitUntil { gates.arrivals("a") == 1 }
            loop.send(.run([.job("-", .cancel("k"))]))
            await recorder.wait(for: .cancelled(queued))
            await recorder.wait(for: .cancelled(.job("a", .serial("k"))))
        }
        #expect(gates.arrivals("b") == 0)
        #expect(report.effectsCancelled == 2)
        #expect(report.effectsStarted == 1)
        #expect(loop.state.log == [])
    }

    @Test func anEffectPastItsTimeoutIsCancelledAndMappedToAnEvent() async throws {
        let (recorder, gates, clock) = (Recorded(), Gates(), ManualClock())
        let loop = Jobs.loop(gates: gates, recorder: recorder, clock: clock)
        let slow = Jobs.Effect.job("slow", .concurrent(timeout: .seconds(5)))
        let report = try await running(loop) {
            loop.send(.run([slow]))
            await waitUntil { gates.arrivals("slow") == 1 }
            await clock.sleepers(atLeast: 1)
            clock.advance(by: .seconds(4))
            #expect(
                recorder.entries.contains(
                    .timedOut(slow, mappedTo: .failed("slow: the effect timed out after 5.0 seconds"))
                ) == false
            )
            clock.advance(by: .seconds(1))
            await recorder.wait(for: .processed(.failed("slow: the effect timed out after 5.0 seconds")))
        }
        #expect(
            recorder.entries.contains(
                .timedOut(slow, mappedTo: .failed("slow: the effect timed out after 5.0 seconds"))
            )
        )
        #expect(report.effectsTimedOut == 1)
    }

    @Test func anEffectWithinItsTimeoutCompletes() async throws {
        let (recorder, gates, clock) = (Recorded(), Gates(), ManualClock())
        let loop = Jobs.loop(gates: gates, recorder: recorder, clock: clock)
        let report = try await running(loop) {
            loop.send(.run([.job("quick", .serial("k", timeout: .seconds(5)))]))
            await waitUntil { gates.arrivals("quick") == 1 }
            gates.open("quick")
            await recorder.wait(for: finished("quick"))
            clock.advance(by: .seconds(10))
        }
        #expect(report.effectsTimedOut == 0)
        #expect(report.effectsCompleted == 1)
    }

    @Test func lifecyclesAreValuesATestCanAssert() {
        #expect(EffectLifecycle.latest("search", timeout: .seconds(2)) == .latest("search", timeout: .seconds(2)))
        #expect(EffectLifecycle.latest("search") != .serial("search"))
        #expect(Jobs.Effect.job("a", .cancel("k")).lifecycle.policy == .cancel)
        #expect(
            EffectLifecycle.serial("job-7", timeout: .seconds(3)).description
                == #".serial("job-7", timeout: 3.0 seconds)"#
        )
    }
}

/// Waits until `condition` holds, looking again after each yield and then each millisecond; fails the
/// test rather than hang if it never does within a generous safety limit.
func waitUntil(
    _ description: String = "condition",
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) async {
    let limit = ContinuousClock.now + .seconds(300)
    var looks = 0
    while !condition() {
        guard ContinuousClock.now < limit else {
            Issue.record("timed out waiting for \(description)", sourceLocation: sourceLocation)
            return
        }
        looks += 1
        // A few quick looks, then one a millisecond: a test spinning on one of the concurrency pool's
        // two threads slows every other test of the process (under TSAN, past their time limits).
        if looks < 64 { await Task.yield() } else { try? await Task.sleep(for: .milliseconds(1)) }
    }
}
