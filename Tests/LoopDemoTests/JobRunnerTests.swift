import EffectHandlers
import LoopCore
import LoopDemo
import Testing

@Suite struct JobRunnerTests {
    typealias State = JobRunner.State
    typealias Job = JobRunner.Job
    typealias Spec = JobRunner.Spec
    let update = Update(JobRunner.update)

    func spec(_ name: String, retries: Int = 0, timeout: Duration? = nil) -> Spec {
        Spec(name: name, command: "run \(name)", timeout: timeout, retries: retries)
    }

    /// A runner with `names` submitted, in order.
    func submitted(_ names: [String], limit: Int = 2, retries: Int = 0) -> State {
        var state = State(limit: limit)
        for name in names { _ = update(&state, .submit(spec(name, retries: retries))) }
        return state
    }

    @Test func aSubmittedJobStartsAtOnceWhenThereIsRoom() {
        let next = update(State(limit: 2), .submit(spec("a")))
        var expected = State(limit: 2)
        expected.jobs = ["a": Job(spec: spec("a"), status: .running(attempt: 1), attempts: 1)]
        expected.order = ["a"]
        #expect(
            next
                == Next(
                    state: expected,
                    effects: [
                        .say("queued a"), .say("started a"),
                        .run(name: "a", attempt: 1, command: "run a", timeout: nil),
                    ]
                )
        )
    }

    @Test func atMostLimitJobsRunAndTheRestWaitInOrder() {
        let state = submitted(["a", "b", "c", "d"], limit: 2)
        #expect(state.runningCount == 2)
        #expect(state.queue == ["c", "d"])
        let next = update(state, .exited(name: "a", attempt: 1, status: 0, output: "ok"))
        #expect(next.state.jobs["a"]?.status == .succeeded(attempts: 1))
        #expect(next.state.jobs["c"]?.status == .running(attempt: 1))
        #expect(next.state.queue == ["d"])
        #expect(
            next.effects == [
                .say("a succeeded"), .say("started c"),
                .run(name: "c", attempt: 1, command: "run c", timeout: nil),
            ]
        )
    }

    @Test(arguments: [(1, 100), (2, 200), (3, 400), (4, 800), (10, 51_200), (11, 60_000), (100, 60_000)])
    func backoffDoublesWithEachRetry(retry: Int, milliseconds: Int) {
        #expect(JobRunner.backoff(base: .milliseconds(100), retry: retry) == .milliseconds(milliseconds))
    }

    @Test func aFailedJobIsRetriedWithBackoff() {
        let state = submitted(["a"], retries: 2)
        // Docs/Demo.md shows these lines (`.ci/guide-check.swift`).
        // snippet
        let next = update(state, .exited(name: "a", attempt: 1, status: 3, output: ""))
        #expect(next.state.jobs["a"]?.status == .waitingToRetry(attempt: 2))
        #expect(
            next.effects == [
                .say("a failed (exit status 3), retry 1 of 2 in 100ms"),
                .retryAfter(name: "a", attempt: 2, delay: .milliseconds(100)),
            ]
        )
        // end snippet
        let retried = update(next.state, .retryDue(name: "a", attempt: 2))
        #expect(retried.state.jobs["a"]?.status == .running(attempt: 2))
        #expect(
            retried.effects == [
                .say("started a (attempt 2)"), .run(name: "a", attempt: 2, command: "run a", timeout: nil),
            ]
        )
        let second = update(retried.state, .exited(name: "a", attempt: 2, status: 1, output: ""))
        #expect(second.effects.last == .retryAfter(name: "a", attempt: 3, delay: .milliseconds(200)))
    }

    @Test func aBackoffIsADelayedEffectThatStopRetryCancels() {
        let retry = JobRunner.Effect.retryAfter(name: "a", attempt: 2, delay: .milliseconds(100))
        #expect(retry.lifecycle == .delayed(by: .milliseconds(100), key: "retry-a"))
        #expect(JobRunner.Effect.cancelRetry(name: "a").lifecycle == .cancel("retry-a"))
    }

    @Test func aJobThatExhaustsItsRetriesIsReportedFailed() {
        var state = submitted(["a"], retries: 1)
        _ = update(&state, .exited(name: "a", attempt: 1, status: 3, output: ""))
        _ = update(&state, .retryDue(name: "a", attempt: 2))
        let effects = update(&state, .exited(name: "a", attempt: 2, status: 3, output: "boom"))
        #expect(
            state.jobs["a"]
                == Job(
                    spec: spec("a", retries: 1),
                    status: .failed(attempts: 2, reason: "exit status 3"),
                    attempts: 2,
                    output: "boom"
                )
        )
        #expect(effects == [.say("a failed after 2 attempts: exit status 3")])
    }

    @Test func aTimedOutAttemptCountsAsAFailure() {
        var state = State(limit: 1)
        _ = update(&state, .submit(spec("slow", timeout: .milliseconds(500))))
        let effects = update(&state, .timedOut(name: "slow", attempt: 1))
        #expect(state.jobs["slow"]?.status == .failed(attempts: 1, reason: "timed out after 500ms"))
        #expect(effects == [.say("slow failed after 1 attempt: timed out after 500ms")])
        #expect(
            JobRunner.Effect.run(name: "slow", attempt: 1, command: "x", timeout: .milliseconds(500)).lifecycle
                == .concurrent("run-slow", timeout: .milliseconds(500))
        )
    }

    @Test func aStaleResultIsIgnored() {
        let state = submitted(["a"], retries: 1)
        #expect(update(state, .exited(name: "a", attempt: 7, status: 0, output: "")) == Next(state: state))
        #expect(update(state, .timedOut(name: "nobody", attempt: 1)) == Next(state: state))
    }

    @Test func cancellingARunningJobStopsItsAttempt() {
        let state = submitted(["a", "b", "c"], limit: 2)
        let next = update(state, .cancel("a"))
        #expect(next.state.jobs["a"]?.status == .cancelled)
        #expect(
            next.effects == [
                .cancelRun(name: "a"), .say("a cancelled"), .say("started c"),
                .run(name: "c", attempt: 1, command: "run c", timeout: nil),
            ]
        )
        #expect(JobRunner.Effect.cancelRun(name: "a").lifecycle == .cancel("run-a"))
    }

    @Test func cancellingAQueuedOrRetryingOrUnknownJob() {
        var state = submitted(["a", "b"], limit: 1, retries: 1)
        #expect(update(&state, .cancel("b")) == [.say("b cancelled")])
        #expect(state.queue == [])
        _ = update(&state, .exited(name: "a", attempt: 1, status: 1, output: ""))
        #expect(update(&state, .cancel("a")) == [.cancelRetry(name: "a"), .say("a cancelled")])
        #expect(update(&state, .cancel("zzz")) == [.say("cannot cancel zzz: no such job")])
        #expect(update(&state, .cancel("a")) == [.say("cannot cancel a: it already cancelled")])
    }

    @Test func invalidSubmissionsAreRejectedWithAReason() {
        var state = submitted(["a"])
        #expect(update(&state, .submit(spec("a"))) == [.say("rejected a: a job with this name exists")])
        #expect(
            update(&state, .submit(Spec(name: "", command: "x"))) == [
                .say("rejected: a job needs a name and a command")
            ]
        )
        #expect(
            update(&state, .submit(Spec(name: "n", command: "x", retries: -1))) == [
                .say("rejected n: retries cannot be negative")
            ]
        )
        // From the cluster's inbox a command can hold a NUL, which would cut what the shell runs.
        for nul in [Spec(name: "n", command: "touch A\u{0}; touch B"), Spec(name: "n\u{0}m", command: "true")] {
            #expect(
                update(&state, .submit(nul)) == [
                    .say("rejected: a job's name and command cannot contain a NUL character")
                ]
            )
        }
        #expect(state.jobs["n"] == nil)
        #expect(update(&state, .invalidInput("unknown command 'fly'")) == [.problem("error: unknown command 'fly'")])
    }

    @Test func shutdownCancelsWhatHasNotStartedAndGivesRunningJobsTheGracePeriod() {
        var state = submitted(["a", "b", "c"], limit: 1, retries: 1)
        let effects = update(&state, .shutdown)
        #expect(state.jobs["a"]?.status == .running(attempt: 1))
        #expect(state.jobs["b"]?.status == .cancelled)
        #expect(state.jobs["c"]?.status == .cancelled)
        #expect(effects == [.say("shutting down: 1 running, given 2s to finish"), .stop(gracePeriod: .seconds(2))])
        // A failure during shutdown is final: no retry.
        #expect(
            update(&state, .exited(name: "a", attempt: 1, status: 1, output: "")) == [
                .say("a failed after 1 attempt: exit status 1")
            ]
        )
        #expect(update(&state, .submit(spec("late"))) == [.say("rejected late: shutting down")])
        #expect(update(&state, .shutdown) == [])
    }

    @Test func theServiceStopsOnceInputHasEndedAndEveryJobIsDone() {
        var state = submitted(["a"])
        #expect(update(&state, .inputEnded) == [])
        #expect(
            update(&state, .exited(name: "a", attempt: 1, status: 0, output: "")) == [
                .say("a succeeded"), .stop(gracePeriod: .seconds(2)),
            ]
        )
        #expect(state.shuttingDown)
    }

    @Test func theSummaryListsEveryJobInSubmissionOrder() {
        var state = submitted(["build", "test", "deploy"], limit: 2)
        _ = update(&state, .exited(name: "build", attempt: 1, status: 0, output: ""))
        _ = update(&state, .cancel("deploy"))
        #expect(
            JobRunner.summary(state) == [
                "job     outcome",
                "build   succeeded",
                "test    cancelled at shutdown",
                "deploy  cancelled",
                "1 succeeded, 0 failed, 2 cancelled",
            ]
        )
    }

    @Test func theTickReportsProgress() {
        let state = submitted(["a", "b", "c"], limit: 2)
        #expect(update(state, .tick).effects == [.progress(running: 2, queued: 1, done: 0, total: 3)])
    }

    /// "exit status 127" alone hid "command not found": the reason now ends with standard error's last
    /// line.
    @Test func aFailureSaysWhatTheCommandLastPrintedOnStandardError() throws {
        var state = JobRunner.State(limit: 1)
        _ = update(&state, .submit(JobRunner.Spec(name: "a", command: "frobnicate")))
        _ = update(
            &state,
            .exited(name: "a", attempt: 1, status: 127, output: "", errors: "sh: 1: frobnicate: not found\n")
        )
        #expect(
            JobRunner.describe(state.jobs["a"]!)
                == "failed after 1 attempt: exit status 127: sh: 1: frobnicate: not found"
        )
    }

    // MARK: Resuming a recovered run

    @Test func aRecoveredRunStartsItsRunningJobsAgainAsTheSameAttempt() {
        var state = submitted(["a", "b", "c"], retries: 2)
        _ = update(&state, .exited(name: "b", attempt: 1, status: 1, output: ""))
        // a runs (attempt 1), b waits to retry (attempt 2: its backoff is a durable timer, resumed by the
        // loop, not here), c started in b's slot.
        #expect(
            JobRunner.resume(state)
                == [
                    .say("resuming a (attempt 1): it was running when the demo stopped"),
                    .run(name: "a", attempt: 1, command: "run a", timeout: nil),
                    .say("resuming c (attempt 1): it was running when the demo stopped"),
                    .run(name: "c", attempt: 1, command: "run c", timeout: nil),
                ]
        )
    }

    @Test func aRecoveredRunThatHadEndedStopsAtOnce() {
        var state = submitted(["a"])
        _ = update(&state, .exited(name: "a", attempt: 1, status: 0, output: ""))
        _ = update(&state, .inputEnded)
        #expect(JobRunner.resume(state) == [.say("the recorded run had ended"), .stop(gracePeriod: .seconds(2))])
        #expect(JobRunner.resume(State(limit: 2)).isEmpty)
    }

    @Test func theMetricsCommandPrintsTheMetricsAndChangesNothing() {
        let state = submitted(["a"])
        #expect(update(state, .metricsRequested) == Next(state: state, effects: [.printMetrics]))
        #expect(Command.event(for: "metrics") == .metricsRequested)
        #expect(Command.event(for: "metrics now") == .invalidInput("usage: metrics"))
    }
}
