import Testing

@testable import LoopRuntime

/// One controlled effect's run as a value: every input of ``EffectRunMachine``, with the handler's task
/// and the waiter as plain strings.
@Suite struct EffectRunMachineTests {
    typealias Machine = EffectRunMachine<String, String>

    func describe(_ outcome: EffectOutcome?) -> String {
        switch outcome {
        case nil: "nil"
        case .completed: "completed"
        case .failed: "failed"
        case .cancelled: "cancelled"
        case .timedOut(let after): "timedOut(\(after))"
        }
    }

    @Test func aCancelBeforeTheTaskIsAttachedCancelsItAsItAttaches() {
        var run = Machine()
        #expect(run.cancel() == nil)
        let cancelNow = run.attach("task")
        #expect(cancelNow)
    }

    @Test func aCancelAfterTheTaskIsAttachedCancelsIt() {
        var run = Machine()
        let cancelNow = run.attach("task")
        #expect(!cancelNow)
        #expect(run.cancel() == "task")
    }

    @Test func theFirstToDecideTheOutcomeWinsAndResumesTheWaiter() {
        var run = Machine()
        #expect(run.awaitOutcome("waiter") == nil)
        let first = run.resolve(.timedOut(.seconds(1)))
        #expect(first.decided && first.resume == "waiter")
        let second = run.resolve(.completed)
        #expect(!second.decided && second.resume == nil)
        #expect(describe(run.outcome) == "timedOut(1.0 seconds)")
    }

    @Test func aHandlerReturningFirstDecidesTheOutcome() {
        var run = Machine()
        let returned = run.handlerReturned(.completed)
        #expect(returned.decided && returned.resume == nil)
        #expect(run.returned && describe(run.outcome) == "completed")
    }

    @Test func aHandlerReturningAfterItsTimeoutIsNotedButDecidesNothing() {
        var run = Machine()
        _ = run.resolve(.timedOut(.seconds(1)))
        #expect(!run.returned)
        let returned = run.handlerReturned(.completed)
        #expect(!returned.decided && run.returned)
        #expect(describe(run.outcome) == "timedOut(1.0 seconds)")
    }

    @Test func aWaiterAfterTheOutcomeGetsItAtOnceAndIsNotKept() {
        var run = Machine()
        _ = run.resolve(.cancelled)
        #expect(describe(run.awaitOutcome("late")) == "cancelled")
        #expect(run.resolve(.completed).resume == nil)
    }
}
