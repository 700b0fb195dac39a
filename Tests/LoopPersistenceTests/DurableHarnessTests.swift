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
        let started = Locked(false)
        let gate = DispatchSemaphore(value: 0)
        let blocker = Task {
            await IdleWork.shared.run { () -> Int in
                started.withLock { $0 = true }
                gate.wait()
                return 0
            }
        }
        await eventually("the idle thread is busy") { started.withLock { $0 } }
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
        let gate = DispatchSemaphore(value: 0)
        let started = Locked(false)
        let blocker = Task {
            await IdleWork.shared.run { () -> Int in
                started.withLock { $0 = true }
                gate.wait()
                return 0
            }
        }
        await eventually("the idle thread is busy") { started.withLock { $0 } }
        guard IdleWork.shared.scheduling.idles else {
            // This process may not leave SCHED_IDLE again: the thread stays at nice 19.
            #expect(IdleWork.shared.scheduling.policy == 0)
            gate.signal()
            _ = await blocker.value
            return
        }
        // (Other suites' snapshots may have raised it already; either way a waiting job keeps it raised.)
        let waiting = Task { await IdleWork.shared.run { 7 } }
        // The blocker's own wait raises it first (its job has not finished); poll the condition.
        var polls = 0
        while IdleWork.shared.scheduling.policy != 0, polls < 2_000 {
            try await Task.sleep(for: .milliseconds(10))
            polls += 1
        }
        #expect(IdleWork.shared.scheduling.policy == 0)
        gate.signal()
        #expect(await blocker.value == 0)
        #expect(await waiting.value == 7)
        polls = 0
        while IdleWork.shared.scheduling.policy != 5, polls < 2_000 {
            try await Task.sleep(for: .milliseconds(10))
            polls += 1
        }
        #expect(IdleWork.shared.scheduling.policy == 5)
    }
}
