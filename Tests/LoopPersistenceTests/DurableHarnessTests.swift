import Dispatch
import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

@Suite struct DurableHarnessTests {
    typealias Accounts = DurableHarness<String, Account.State, Account.Event, Account.Effect>

    @Test func requestsARestartAndMoreRequestsAssertedAsValues() async throws {
        let accounts = Accounts(program: Account.program, effects: Account.router, snapshotEvery: 2)
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await accounts.request(to: "a") { .audit(replyTo: $0) } == .done(balance: 5))
        await accounts.settle()
        #expect(accounts.takeEffects().map(\.effect) == [.runAudit])
        try await accounts.restart()
        // After the restart: the recorded answer for the key, the recorded state, nothing applied twice.
        #expect(try await accounts.request(to: "a", key: "d1") { .deposit(5, replyTo: $0) } == .done(balance: 5))
        #expect(try await accounts.state(of: "a") == Account.State(balance: 5))
        #expect(
            try await accounts.request(to: "a", key: "w1") { .withdraw(7, replyTo: $0) } == .insufficient(balance: 5)
        )
        #expect(try await accounts.store.version(of: "a") == 4)
        try await accounts.finish()
    }

    @Test func aPlainLoopSettlesOnceItsEffectsAndWhatTheySentAreDone() async throws {
        let gate = Locked<CheckedContinuation<Void, Never>?>(nil)
        let loop = Loop(
            program: Program(
                first: First(state: [Int]()),
                update: Update { (numbers: inout [Int], number: Int) in
                    numbers.append(number)
                    return number < 3 ? [number + 1] : []
                }
            ),
            effects: EffectRouter<Int, Int>().route(
                { $0 },
                to: ClosureEffectHandler { number, send in
                    // The first effect waits until the test opens the gate.
                    if number == 1 {
                        await withCheckedContinuation { continuation in gate.withLock { $0 = continuation } }
                    }
                    send(number)
                }
            )
        )
        let running = Task { try await loop.run() }
        _ = await loop.waitUntilRunning()
        loop.send(0)
        let settled = Task { await loop.whenSettled() }
        await eventually("the first effect waits") { gate.withLock { $0 != nil } }
        #expect(loop.state == [0])
        gate.withLock { $0 }?.resume()
        await settled.value
        #expect(loop.state == [0, 1, 2, 3])
        loop.stop()
        _ = try await running.value
    }
}

@Suite(.serialized) struct IdleWorkTests {
    /// While the idle thread is busy, a newer snapshot of a stream replaces the one still waiting.
    @Test func aNewerJobOfAKeyReplacesOneNotYetStarted() async {
        // A thread of its own: occupying the process's would hold up every snapshot of the tests running
        // beside this one, and a graceful stop waits for its loop's snapshot (ci: a durable group's stop
        // ran out of its 30 s grace while this test held the shared thread through a loaded pool's awaits).
        let work = IdleWork()
        let (blocker, gate) = await occupy(work)
        let older = Task { await work.run(key: "idle-test") { 1 } }
        await eventually("the older job waits") { work.isQueued("idle-test") }
        let newer = Task { await work.run(key: "idle-test") { 2 } }
        // The older one is answered `nil`, unrun, as soon as the newer one takes its place.
        #expect(await older.value == nil)
        #expect(work.isQueued("idle-test"))
        gate.signal()
        #expect(await newer.value == 2)
        #expect(await blocker.value == 0)
    }

    /// The thread waits for idle processors only (`SCHED_IDLE`); a job that has waited a second raises it
    /// to `nice` 19 (`SCHED_OTHER`), so snapshots come under a full load too, and it goes back once its
    /// queue is empty.
    @Test func aJobThatWaitedRaisesTheThreadUntilTheQueueIsEmpty() async throws {
        // A thread of its own, so the snapshots of tests running beside this one change nothing here.
        let work = IdleWork(patience: .milliseconds(50))
        let (blocker, gate) = await occupy(work)
        guard work.scheduling.idles else {
            // This process may not leave SCHED_IDLE again: the thread stays at nice 19.
            #expect(work.scheduling.policy == 0)
            gate.signal()
            _ = await blocker.value
            return
        }
        let waiting = Task { await work.run { 7 } }
        try await poll("the thread is raised") { work.scheduling.policy == 0 }
        gate.signal()
        #expect(await blocker.value == 0)
        #expect(await waiting.value == 7)
        try await poll("the thread is back under SCHED_IDLE") { work.scheduling.policy == 5 }
    }

    /// A job that waited while the thread was still starting raises it too: the thread looks for a raise
    /// after it went idle, so the raise is not undone by the thread's own first change (ci: the raise
    /// fell between the thread's publishing itself and its going idle, and it stayed idle for good).
    @Test func aJobThatWaitedWhileTheThreadStartedRaisesIt() async throws {
        // Raised at once: the timer fires while the new thread starts, or right after.
        let work = IdleWork(patience: .zero)
        let (blocker, gate) = await occupy(work)
        if work.scheduling.idles {
            try await poll("the thread is raised") { work.scheduling.policy == 0 }
        }
        gate.signal()
        #expect(await blocker.value == 0)
        if work.scheduling.idles {
            try await poll("the thread is back under SCHED_IDLE") { work.scheduling.policy == 5 }
        }
    }

    /// A hurried owner's jobs leave the queue and run on the tasks that wait for them, at once, and its
    /// later jobs never queue; another owner's job of the same key still waits for the thread.
    @Test func aHurriedOwnersJobsRunAtOnceWhereTheyAreAskedFor() async {
        let work = IdleWork()
        let (blocker, gate) = await occupy(work)
        let (stopping, other) = (IdleWork.Owner(), IdleWork.Owner())
        let waiting = Task { await work.run(owner: stopping, key: "hurried") { 1 } }
        let unrelated = Task { await work.run(owner: other, key: "hurried") { 2 } }
        await eventually("both jobs wait") {
            work.isQueued("hurried") && work.queued(of: stopping) == 1 && work.queued(of: other) == 1
        }
        work.hurry(stopping)
        // The thread is still held: only a job handed back can have run.
        #expect(await waiting.value == 1)
        #expect(await work.run(owner: stopping, key: "hurried") { 3 } == 3)
        #expect(work.queued(of: stopping) == 0)
        #expect(work.queued(of: other) == 1)
        gate.signal()
        #expect(await unrelated.value == 2)
        #expect(await blocker.value == 0)
    }

    /// A graceful stop of a durable group or loop does not wait for the idle thread: the snapshot its
    /// last append carries is encoded on the stopping loop's task (ci: a group's stop ran out of its
    /// 30 s grace while the process's idle thread worked through other loops' snapshots).
    @Test func aGracefulStopSavesItsSnapshotsWithoutWaitingForTheIdleThread() async throws {
        let (blocker, gate) = await occupy(IdleWork.shared)
        // The process's thread is released whatever happens here: every other test's snapshots wait for it.
        do { try await stopWhileTheIdleThreadIsHeld() } catch { Issue.record(error) }
        gate.signal()
        #expect(await blocker.value == 0)
    }

    func stopWhileTheIdleThreadIsHeld() async throws {
        let group = Account.Group(
            program: Account.program,
            effects: Account.router,
            store: InMemoryEventStore(),
            snapshotEvery: 1
        )
        let runningGroup = Task { try await group.run() }
        #expect(try await group.sendDurably(.note(1), to: "a") == 1)
        group.stop()
        #expect(try await runningGroup.value.ending == .drained)
        #expect(group.storeWork.snapshotsSaved == 1)

        let store = InMemoryEventStore()
        let loop = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: Card(store: store).router,
            store: store,
            snapshotEvery: 1
        )
        let runningLoop = Task { try await loop.run() }
        #expect(try await loop.sendDurably(.add(1)) == 1)
        loop.stop()
        #expect(try await runningLoop.value.ending == .drained)
        // The charge the addition started records an event of its own, whose snapshot replaces the first
        // one if that still waits: the latest is of the stream's last version.
        #expect(loop.storeWork.snapshotsSaved >= 1)
        #expect(try await store.latestSnapshot(of: "ledger")?.version == store.version(of: "ledger"))

        // A stop the program asks for with an effect (a charge of 0 here) hurries them too.
        let stopping = InMemoryEventStore()
        let stoppedByItsProgram = DurableLoop(
            stream: "ledger",
            program: Ledger.program,
            effects: EffectRouter<Ledger.Effect, Ledger.Event>().stopLoop { $0 == .charge(0) ? .seconds(30) : nil },
            store: stopping,
            snapshotEvery: 1
        )
        let runningItself = Task { try await stoppedByItsProgram.run() }
        #expect(try await stoppedByItsProgram.sendDurably(.add(0)) == 1)
        #expect(try await runningItself.value.ending == .drained)
        #expect(stoppedByItsProgram.storeWork.snapshotsSaved == 1)
        #expect(try await stopping.latestSnapshot(of: "ledger")?.version == 1)
    }

    /// Occupies `work`'s thread with a job that returns 0 once the semaphore is signalled.
    func occupy(_ work: IdleWork) async -> (job: Task<Int?, Never>, gate: DispatchSemaphore) {
        let started = Locked(false)
        let gate = DispatchSemaphore(value: 0)
        let job = Task {
            await work.run { () -> Int in
                started.withLock { $0 = true }
                gate.wait()
                return 0
            }
        }
        await eventually("the idle thread is busy") { started.withLock { $0 } }
        return (job, gate)
    }

    /// Waits until `condition` holds, looking every 10 ms (the thread's policy changes on other threads,
    /// after a wait measured on the wall clock), for at most 20 s.
    func poll(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<2_000 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("\(what): never")
    }
}
