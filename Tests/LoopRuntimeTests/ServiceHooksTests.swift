import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a service framework needs of the library: one protocol for its runnable parts, sources that
/// wait for room instead of dropping, signals that share the process with other watchers.
@Suite struct ServiceHooksTests {
    @Test func aStreamSourceWaitsForRoomInAFullInboxAndLosesNothing() async throws {
        let (stream, continuation) = AsyncStream<Jobs.Event>.makeStream()
        let busy = BusyLoop(.bounded(2, whenFull: .suspendSender), sources: [AsyncSequenceSource(stream)])
        let report = try await running(busy.loop) {
            await busy.hold()
            for value in 0..<1_000 { continuation.yield(.append(value)) }
            continuation.finish()
            // The inbox holds two; the source waits with the third instead of dropping it.
            await waitUntil("the source to wait for room") { busy.loop.report.sendersWaiting == 1 }
            busy.release()
            await busy.recorder.wait(for: .sourceFinished)
        }
        #expect(busy.loop.state.items == Array(0..<1_000))
        #expect(report.eventsRejected == 0)
        #expect(report.eventsDropped == 0)
        #expect(!busy.recorder.entries.contains { if case .rejected = $0 { true } else { false } })
    }

    @Test func aLineSourceWaitsForRoomInAFullInboxAndLosesNothing() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (reading, writing) = (descriptors[0], descriptors[1])
        defer { close(reading) }
        let lines = LineSource<Jobs.Event>(fileDescriptor: reading, end: .note("<end>")) { .append(Int($0) ?? -1) }
        let busy = BusyLoop(.bounded(2, whenFull: .suspendSender), sources: [lines])
        let report = try await running(busy.loop) {
            await busy.hold()
            var bytes = Array((0..<1_000).map { "\($0)\n" }.joined().utf8)
            #expect(write(writing, &bytes, bytes.count) == bytes.count)
            close(writing)
            await waitUntil("the source to wait for room") { busy.loop.report.sendersWaiting == 1 }
            busy.release()
            await busy.recorder.wait(for: .processed(.note("<end>")))
        }
        #expect(busy.loop.state.items == Array(0..<1_000))
        #expect(report.eventsRejected == 0)
        #expect(report.eventsDropped == 0)
    }

    @Test func aLineSourceReadsNoFurtherAheadThanTheLoopTakes() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (reading, writing) = (descriptors[0], descriptors[1])
        defer { close(reading) }
        _ = fcntl(writing, F_SETFL, fcntl(writing, F_GETFL) | O_NONBLOCK)
        let lines = LineSource<Jobs.Event>(fileDescriptor: reading) { .append(Int($0) ?? -1) }
        let busy = BusyLoop(.bounded(1, whenFull: .suspendSender), sources: [lines])
        let line = Array(String(repeating: "7", count: 1_023).utf8) + [UInt8(ascii: "\n")]
        var written = 0
        let report = try await running(busy.loop) {
            await busy.hold()
            // Writes 8 MiB of lines while the loop takes none: once the reader is a few chunks ahead it
            // stops reading, the pipe fills, and it stays full.
            while written < 8 << 20 {
                let count = line.withUnsafeBytes { write(writing, $0.baseAddress, $0.count) }
                if count > 0 {
                    written += count
                    continue
                }
                var full = pollfd(fd: writing, events: Int16(POLLOUT), revents: 0)
                if poll(&full, 1, 500) == 0 { break }
            }
            busy.release()
            close(writing)
            await busy.recorder.wait(for: .sourceFinished)
        }
        // The pipe (64 KiB), two chunks read ahead (128 KiB) and the lines waiting for room: far below 8 MiB.
        #expect(written < 1 << 20)
        #expect(busy.loop.state.items.count * line.count == written)
        #expect(report.eventsRejected == 0)
    }

    @Test func aMappedSenderKeepsWaitingForRoom() async throws {
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let source = MappedSource(AsyncSequenceSource(stream)) { Jobs.Event.append($0) }
        let busy = BusyLoop(.bounded(1, whenFull: .suspendSender), sources: [source])
        _ = try await running(busy.loop) {
            await busy.hold()
            for value in 0..<100 { continuation.yield(value) }
            continuation.finish()
            await waitUntil("the source to wait for room") { busy.loop.report.sendersWaiting == 1 }
            busy.release()
            await busy.recorder.wait(for: .sourceFinished)
        }
        #expect(busy.loop.state.items == Array(0..<100))
    }

    @Test func aSenderWithoutRoomToWaitForSendsAtOnce() async {
        let taken = Locked<[Int]>([])
        let send = Send<Int> { value in
            taken.withLock { $0.append(value) }
            return .rejected(.inboxFull)
        }
        #expect(await send.waitingForRoom(1) == .rejected(.inboxFull))
        #expect(await send.map { $0 * 2 }.waitingForRoom(2) == .rejected(.inboxFull))
        #expect(taken.withLock { $0 } == [1, 4])
    }

    /// Each case watches a signal of its own: once a disposition was put back, libdispatch on Linux does
    /// not catch that signal again in the same process (see ``SignalSource``).
    @Test(arguments: [(ProcessSignal.user1, true), (ProcessSignal.user2, false)])
    func aSignalSourceLeavesItsSignalCaughtUnlessAskedToRestoreIt(
        _ watched: ProcessSignal,
        restoring: Bool
    ) async throws {
        let number = watched.rawValue
        signal(number, SIG_DFL)
        let recorder = Recorder<Jobs.Event, Jobs.Effect>()
        let signals = SignalSource<Jobs.Event>([watched], restoringDisposition: restoring) { .note("\($0)") }
        let ended = Locked(false)
        let source = ClosureEventSource<Jobs.Event> { send in
            try? await signals.run(send: send)
            ended.withLock { $0 = true }
        }
        let loop = Loop(
            program: Jobs.program,
            effects: Jobs.router(gates: Gates()),
            sources: [source],
            observer: recorder
        )
        _ = try await running(loop) {
            await waitUntil("the source to catch \(watched)") { Self.disposition(number) != Self.byDefault }
            // Delivered only where the disposition stays caught: a delivery still pending when the
            // default action comes back would end the test process.
            guard !restoring else { return }
            // The watcher is installed just after the disposition: deliver until it reports one, pausing
            // between deliveries so they do not pile up.
            for _ in 0..<12_000 where !recorder.entries.contains(.processed(.note("\(watched)"))) {
                kill(getpid(), number)
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(recorder.entries.contains(.processed(.note("\(watched)"))))
        }
        await waitUntil("the source to end") { ended.withLock { $0 } }
        if restoring {
            #expect(Self.disposition(number) == Self.byDefault)
        } else {
            // Still caught (by libdispatch's handler): another watcher of the signal keeps it, and a
            // delivery now does not end the process.
            #expect(Self.disposition(number) != Self.byDefault)
        }
    }

    /// The signal's disposition now (read without changing it), as the handler's address.
    static func disposition(_ number: Int32) -> Int? {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0 else { return nil }
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self)
    }

    static let byDefault = unsafeBitCast(SIG_DFL, to: Int.self)

    @Test func everyRunnablePartStopsThroughTheOneProtocol() async throws {
        let loop = Jobs.loop(recorder: Recorder())
        let group = LoopGroup<Int, Jobs.State, Jobs.Event, Jobs.Effect>(
            program: { _ in Jobs.program },
            effects: Jobs.router(gates: Gates())
        )
        let parts: [(any Runnable, @Sendable () -> Bool, @Sendable () -> Delivery)] = [
            (loop, { loop.isRunning }, { loop.send(.note("x")) }),
            (group, { group.isRunning }, { group.send(.note("x"), to: 1) }),
        ]
        for (part, isRunning, send) in parts {
            let report = try await Self.serve(part) {
                await waitUntil("the part to run", isRunning)
                #expect(send() == .accepted)
            }
            #expect(report.ending == .drained)
            #expect(report.eventsProcessed == 1)
        }
        #expect(loop.state.log == ["x"])
    }

    /// What a service adapter does with any part: runs it, and stops it gracefully on shutdown.
    static func serve(_ part: some Runnable, while body: () async -> Void) async throws -> LoopReport {
        try await withThrowingTaskGroup(of: LoopReport.self) { tasks in
            tasks.addTask { try await part.run() }
            await body()
            part.stop(gracePeriod: .seconds(30))
            return try await tasks.next() ?? LoopReport()
        }
    }

    @Test func anObserverOfBothKindsIsTakenAsAGroupObserver() async throws {
        final class Both: LoopObserver, LoopGroupObserver, Sendable {
            let ids = Locked<[Int?]>([])
            func observe(_ activity: LoopActivity<Jobs.Event, Jobs.Effect>) {}
            func observe(_ activity: LoopActivity<Jobs.Event, Jobs.Effect>, of entity: Int?) {
                if case .eventProcessed = activity { ids.withLock { $0.append(entity) } }
            }
        }
        let both = Both()
        let group = LoopGroup<Int, Jobs.State, Jobs.Event, Jobs.Effect>(
            program: { _ in Jobs.program },
            effects: Jobs.router(gates: Gates()),
            observer: both
        )
        _ = try await Self.serve(group) {
            await waitUntil("the group to run") { group.isRunning }
            group.send(.note("x"), to: 7)
        }
        #expect(both.ids.withLock { $0 } == [7])
    }
}
