import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The smaller public pieces, each on its own.
@Suite struct PartsTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    @Test func theLoggerWritesOneReadableLinePerHappening() async throws {
        let lines = Locked([String]())
        let logger = LoopLogger<Jobs.Event, Jobs.Effect>(label: "jobs") { line in lines.withLock { $0.append(line) } }
        let loop = Loop(program: Jobs.program, effects: Jobs.router(gates: Gates()), observer: logger)
        _ = try await running(loop) {
            loop.send(.run([.echo("hi"), .orphan]))
        }
        let logged = lines.withLock { $0 }
        #expect(
            logged.contains {
                $0.hasPrefix(#"[jobs] event run([LoopRuntimeTests.Jobs.Effect.echo("hi")"#)
                    && $0.contains("processed in")
            }
        )
        // Each effect's lines carry its id, so a start pairs with its end.
        #expect(logged.contains(#"[jobs] effect #1 echo("hi") started (.concurrent())"#))
        #expect(logged.contains(#"[jobs] effect #1 echo("hi") completed"#))
        #expect(logged.contains("[jobs] effect #2 orphan failed: no route handles this effect (unhandled)"))
        #expect(logged.contains("[jobs] stopping"))
        #expect(logged.last?.hasPrefix("[jobs] stopped: events: 2 sent, 2 processed") == true)
    }

    @Test func aHookOnAskedStopsRunsOnlyForThemAndAsksEachEffectOnce() {
        let asked = Atomic(0)
        let hooked = Atomic(0)
        let router = EffectRouter<Int, Int>()
            .stopLoop(on: { effect in
                asked.add(1, ordering: .relaxed)
                return effect == 0 ? .seconds(3) : nil
            })
            .whenStopAsked { hooked.add(1, ordering: .relaxed) }
        #expect(router.stopOn?(7) == nil)
        #expect(asked.load(ordering: .relaxed) == 1)
        #expect(hooked.load(ordering: .relaxed) == 0)
        #expect(router.stopOn?(0) == .seconds(3))
        #expect(asked.load(ordering: .relaxed) == 2)
        #expect(hooked.load(ordering: .relaxed) == 1)
        // Without a stop to ask about there is nothing to hook.
        #expect(EffectRouter<Int, Int>().whenStopAsked {}.stopOn == nil)
    }

    @Test func aScriptedHandlerAnswersFromItsScript() async throws {
        struct Refused: Error {}
        let recorder = Recorded()
        let scripted = ScriptedEffectHandler<String, Jobs.Event> { name in
            guard name != "refuse" else { throw Refused() }
            return [.note("\(name) 1"), .note("\(name) 2")]
        }
        let router = EffectRouter<Jobs.Effect, Jobs.Event>()
            .route({ if case .job(let name, _) = $0 { name } else { nil } }, to: scripted)
            .route({ if case .echo(let name) = $0 { name } else { nil } }, to: scripted.inline)
        let loop = Loop(program: Jobs.program, effects: router, observer: recorder)
        _ = try await running(loop) {
            loop.send(.run([.echo("sync"), .job("async", .concurrent()), .job("refuse", .concurrent())]))
            await recorder.wait(for: .processed(.note("async 2")))
            await recorder.wait(for: "the refusal") {
                $0.contains { if case .failed(.job("refuse", _), _, _) = $0 { true } else { false } }
            }
        }
        #expect(loop.state.log == ["sync 1", "sync 2", "async 1", "async 2"])
    }

    @Test func theFirstMatchingRouteWins() throws {
        let router = EffectRouter<Int, String>()
            .route({ $0 > 10 ? $0 : nil }, to: ClosureSyncEffectHandler { _, send in send("big") })
            .route({ $0 }, to: ClosureSyncEffectHandler { _, send in send("any") })
        let sent = Locked([String]())
        let send = Send<String> { event in
            sent.withLock { $0.append(event) }
            return .accepted
        }
        for value in [50, 5] {
            guard case .sync(let perform) = router.performer(for: value) else {
                Issue.record("no synchronous route for \(value)")
                continue
            }
            try perform(value, send)
        }
        #expect(sent.withLock { $0 } == ["big", "any"])
        #expect(EffectRouter<Int, String>().performer(for: 1) == nil)
    }

    @Test func aMappedSenderTransformsEachEvent() {
        let sent = Locked([Jobs.Event]())
        let send = Send<Jobs.Event> { event in
            sent.withLock { $0.append(event) }
            return .rejected(.inboxFull)
        }
        let numbers: Send<Int> = send.map { .append($0) }
        #expect(numbers(4) == .rejected(.inboxFull))
        #expect(sent.withLock { $0 } == [.append(4)])
    }

    @Test func theManualClockWakesSleepersInDeadlineOrderAndOnlyWhenAdvanced() async throws {
        let clock = ManualClock()
        let woken = Locked([Int]())
        try await withThrowingTaskGroup(of: Void.self) { group in
            for seconds in [3, 1, 2] {
                group.addTask {
                    try await clock.sleep(for: .seconds(seconds))
                    woken.withLock { $0.append(seconds) }
                }
            }
            await clock.sleepers(atLeast: 3)
            clock.advance(by: .milliseconds(999))
            #expect(woken.withLock { $0 } == [])
            clock.advance(by: .seconds(5))
            try await group.waitForAll()
        }
        #expect(woken.withLock { $0 }.sorted() == [1, 2, 3])
        #expect(clock.now == ManualClock.Instant(offset: .milliseconds(5_999)))
    }

    @Test func aCancelledSleeperThrowsAndLeavesTheClock() async {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(1)) }
        await clock.sleepers(atLeast: 1)
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test func aMergedSourceRunsTheOthersOnWhenOneFailsThenThrows() async throws {
        struct Broken: Error {}
        let received = Locked([Int]())
        let send = Send<Int> { value in
            received.withLock { $0.append(value) }
            return .accepted
        }
        let failing = ClosureEventSource<Int> { _ in throw Broken() }
        let counting = ClosureEventSource<Int> { send in for value in 1...3 { send(value) } }
        await #expect(throws: Broken.self) { try await MergedSource(failing, counting).run(send: send) }
        #expect(received.withLock { $0 } == [1, 2, 3])
    }

    /// Hostile lines are rejected whole, with a reason, and reading resumes at the next line: an over-long
    /// line was once cut into pieces and its first piece run as a command.
    @Test func overLongAndNULLinesAreRejectedWholeAndReadingResumes() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (reading, writing) = (descriptors[0], descriptors[1])
        let limit = LineSource<Jobs.Event>.maximumLineLength
        let lines = Locked([String]())
        let writer = OSThread {
            var bytes = [UInt8](repeating: UInt8(ascii: "x"), count: limit + 10) + Array("\ntouch ok\n".utf8)
            bytes += Array("touch nulA".utf8) + [0] + Array("B\nlast".utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes {
                    write(writing, $0.baseAddress?.advanced(by: offset), $0.count - offset)
                }
                guard written > 0 else { break }
                offset += written
            }
            close(writing)
        }
        let source = LineSource<Jobs.Event>(
            fileDescriptor: reading,
            invalid: { .note("invalid: \($0)") },
            event: { .note($0) }
        )
        try await source.run(
            send: Send { event in
                if case .note(let line) = event { lines.withLock { $0.append(line) } }
                return .accepted
            }
        )
        writer.join()
        close(reading)
        #expect(
            lines.withLock { $0 } == [
                "invalid: line 1 is longer than \(limit) bytes and was ignored",
                "touch ok",
                "invalid: line 3 contains a NUL byte and was ignored",
                "last",
            ]
        )
    }

    /// A closed descriptor (`loop-demo --stdin <&-`) ends the input: `end` is sent, and the failure thrown.
    @Test func aClosedDescriptorEndsTheInput() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let closed = fcntl(descriptors[0], F_DUPFD, 900)
        close(descriptors[0])
        close(descriptors[1])
        close(closed)
        let received = Locked([Jobs.Event]())
        let source = LineSource<Jobs.Event>(fileDescriptor: closed, end: .note("<end>")) { .note($0) }
        await #expect(throws: LineSourceError.readFailed(errno: EBADF)) {
            try await source.run(
                send: Send { event in
                    received.withLock { $0.append(event) }
                    return .accepted
                }
            )
        }
        #expect(received.withLock { $0 } == [.note("<end>")])
    }
}
