import LoopCore
import LoopRuntime
import Testing

/// A request's outcome is decided once, whichever comes first: the outcome or the caller's
/// continuation.
@Suite struct RequestWaiterTests {
    /// Waits on `waiter`, installing the continuation after `before` ran.
    func outcome(of waiter: RequestWaiter<String>, before: () -> Void = {}) async -> Result<String, RequestError> {
        before()
        return await withCheckedContinuation { waiter.install($0) }
    }

    @Test func anOutcomeDecidedBeforeTheContinuationIsHandedOverWhenItComes() async {
        let waiter = RequestWaiter<String>()
        #expect(!waiter.isResolved)
        #expect(waiter.resolve(.success("early")))
        #expect(waiter.isResolved)
        #expect(!waiter.resolve(.success("late")), "decided once")
        waiter.fail(.cancelled)
        #expect(await outcome(of: waiter) == .success("early"))
    }

    @Test func aWaitingContinuationGetsTheFirstOutcomeOnly() async {
        let waiter = RequestWaiter<String>()
        let waiting = Task { await outcome(of: waiter) }
        // The continuation may or may not be installed yet: either way the first outcome wins.
        #expect(waiter.resolve(.failure(.timedOut(after: .seconds(1)))))
        #expect(!waiter.resolve(.success("second")))
        #expect(await waiting.value == .failure(.timedOut(after: .seconds(1))))
        #expect(waiter.isResolved)
    }
}
