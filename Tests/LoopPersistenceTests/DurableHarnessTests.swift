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
        let (blocker, gate) = await occupy(IdleWork.shared)
        let older = Task { await IdleWork.shared.run(key: "idle-test") { 1 } }
        await eventually("the older job waits") { IdleWork.shared.isQueued("idle-test") }
        let newer = Task { await IdleWork.shared.run(key: "idle-test") { 2 } }
        // The older one is answered `nil`, unrun, as soon as the newer one takes its place.
        #expect(await older.value == nil)
        #expect(IdleWork.shared.isQueued("idle-test"))
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
