import Testing

@testable import LoopRuntime

/// The host's state machine as a value: every input of ``HostMachine``, with jobs and waiters as plain
/// strings, and what it asks the host to do.
@Suite struct HostMachineTests {
    typealias Machine = HostMachine<String, String, String>

    /// A wake as a word, for comparison.
    func describe(_ wake: Machine.Wake) -> String {
        switch wake {
        case .none: "none"
        case .launch: "launch"
        case .resume(let waiter, let command): "resume \(waiter) \(describe(command))"
        }
    }

    func describe(_ command: HostCommand?) -> String {
        switch command {
        case nil: "nil"
        case .startSources: "startSources"
        case .addRunners(let count): "addRunners(\(count))"
        case .stop(let gracePeriod): "stop(\(gracePeriod))"
        case .deadline: "deadline"
        case .quiescent: "quiescent"
        case .cancelled: "cancelled"
        }
    }

    /// What `next` gives the hosting task: a command, `"end"` (nothing is left), or `"parked"`.
    func next(_ machine: inout Machine, _ waiter: String = "w") -> String {
        switch machine.next(waiter) {
        case .some(.some(let command)): describe(command)
        case .some(nil): "end"
        case nil: "parked"
        }
    }

    /// A machine whose hosting task runs, has added the runner the first job asked for, and waits.
    func coordinating(jobs: [String] = ["a"]) -> Machine {
        var machine = Machine()
        for job in jobs { _ = machine.spawn(job) }
        _ = machine.next("w")
        _ = machine.next("w")
        return machine
    }

    /// A machine whose hosting task runs and stays (`run()`'s), not waiting for a command: what the
    /// inputs post is there for its next `next`.
    func hosting() -> Machine {
        var machine = Machine()
        _ = machine.launchKeepingTask()
        return machine
    }

    @Test func aJobPostedToADormantHostLaunchesItsTaskAndCallsARunner() {
        var machine = Machine()
        #expect(describe(machine.spawn("a").0) == "launch")
        #expect(machine.hasTask)
        #expect((machine.runners, machine.runnersComing, machine.runnersToAdd) == (1, 1, 1))
    }

    @Test func theHostingTaskAddsTheRunnersAskedForThenWaits() {
        var machine = Machine()
        _ = machine.spawn("a")
        #expect(next(&machine) == "addRunners(1)")
        #expect(next(&machine) == "parked")
    }

    @Test func aJobPostedWhileARunnerIsOnItsWayCallsNoOther() {
        var machine = coordinating()
        #expect(describe(machine.spawn("b").0) == "none")
        #expect(machine.runners == 1)
    }

    @Test func aRunnerThatTakesAJobAndLeavesOthersCallsForMore() {
        var machine = coordinating(jobs: ["a", "b"])
        let (job, wake) = machine.nextJob(first: true)
        #expect(job == "a")
        #expect(describe(wake) == "resume w addRunners(1)")
    }

    @Test func aRunnerFindingNothingEndsAndTheLastOneEndsTheHostingTask() {
        var machine = coordinating()
        _ = machine.nextJob(first: true)
        let (job, wake) = machine.nextJob(first: false)
        #expect(job == nil)
        #expect(describe(wake) == "resume w nil")
        #expect(!machine.hasTask)
    }

    @Test func aJobPostedToAClosedHostIsHandedBackToAbandon() {
        var machine = coordinating()
        _ = machine.finish()
        let (wake, cancel) = machine.spawn("a")
        #expect(describe(wake) == "none" && cancel == "a")
        #expect(machine.queue.isEmpty)
    }

    @Test func finishingHandsBackTheJobsNotStartedAndARunnerFindsNone() {
        var machine = coordinating(jobs: ["a", "b"])
        #expect(machine.finish() == (["a", "b"], false))
        let (job, _) = machine.nextJob(first: true)
        #expect(job == nil && machine.runners == 0)
    }

    @Test func aBacklogDoublesItsRunnersAtEachTurn() {
        var machine = coordinating(jobs: ["a", "b", "c", "d", "e"])
        _ = machine.nextJob(first: true)
        _ = next(&machine)
        // Two at work, three waiting: two more asked for.
        let (_, wake) = machine.nextJob(first: true)
        #expect(describe(wake) == "resume w addRunners(2)")
        #expect((machine.runners, machine.runnersComing) == (4, 2))
    }

    @Test(arguments: ["stop", "deadline", "cancel", "sources"])
    func aShutdownInputOrSourcesLaunchADormantHostingTask(_ input: String) {
        var machine = Machine()
        let wake: Machine.Wake =
            switch input {
            case "stop": machine.askToStop(gracePeriod: .seconds(1)).0
            case "deadline": machine.deadlineFired().0
            case "cancel": machine.cancel().0
            default: machine.startSources {}
            }
        #expect(describe(wake) == "launch")
    }

    @Test func theHostingTaskOfRunIsNotLaunchedAgainAndAParkedWaiterStays() {
        var machine = coordinating()
        let launched = machine.launchKeepingTask()
        #expect(!launched)
        _ = machine.nextJob(first: true)
        // The runner ends, but the hosting task stays: it is `run()`'s.
        #expect(describe(machine.nextJob(first: false).1) == "none")
        #expect(machine.hasTask)
    }

    @Test func aStopAskedForComesAsACommandTheShortestGracePeriodWinning() {
        var machine = hosting()
        machine.join()
        _ = machine.askToStop(gracePeriod: .seconds(30))
        #expect(machine.askToStop(gracePeriod: .seconds(5)).startDeadline == false)
        #expect([next(&machine), next(&machine)] == ["stop(5.0 seconds)", "parked"])
    }

    @Test func aStopWithNoMemberIsQuiescentAtOnceAfterTheStopCommand() {
        var machine = hosting()
        _ = machine.askToStop(gracePeriod: .seconds(1))
        #expect([next(&machine), next(&machine)] == ["stop(1.0 seconds)", "quiescent"])
    }

    @Test func aStopAskedForOnceTheHostIsClosingStartsItsOwnDeadline() {
        var machine = coordinating()
        _ = machine.finish()
        #expect(machine.askToStop(gracePeriod: .seconds(1)).startDeadline)
    }

    @Test func theLastMemberLeavingAfterAStopMakesTheHostQuiescent() {
        var machine = coordinating()
        machine.join()
        // The waiting hosting task is handed the stop at once, and waits again.
        #expect(describe(machine.askToStop(gracePeriod: .seconds(1)).0) == "resume w stop(1.0 seconds)")
        #expect(next(&machine) == "parked")
        #expect(describe(machine.leave()) == "resume w quiescent")
    }

    @Test func aMemberLeavingWithoutAStopChangesNothing() {
        var machine = coordinating()
        machine.join()
        machine.join()
        #expect(describe(machine.leave()) == "none")
        #expect(machine.members == 1)
    }

    @Test func aCancellationComesBeforeEveryOtherCommandAndStays() {
        var machine = hosting()
        _ = machine.spawn("a")
        _ = machine.askToStop(gracePeriod: .seconds(1))
        _ = machine.deadlineFired()
        #expect(machine.cancel().endNow == false)
        #expect([next(&machine), next(&machine)] == ["cancelled", "cancelled"])
    }

    @Test func whatComesAfterACancellationChangesNothing() {
        var machine = hosting()
        _ = machine.cancel()
        _ = machine.askToStop(gracePeriod: .seconds(1))
        _ = machine.deadlineFired()
        _ = machine.startSources {}
        _ = machine.leave()
        #expect(next(&machine) == "cancelled")
        #expect(machine.finish().endNow)
    }

    @Test func aDeadlineTakenIsNotTakenAgainAndLeavesTheStopsOtherCommands() {
        var machine = hosting()
        _ = machine.askToStop(gracePeriod: .seconds(2))
        _ = machine.deadlineFired()
        #expect([next(&machine), next(&machine), next(&machine)] == ["deadline", "stop(2.0 seconds)", "quiescent"])
    }

    @Test func aCancellationOnceTheHostIsClosingEndsRunsWaitAtOnce() {
        var machine = coordinating()
        _ = machine.finish()
        #expect(machine.cancel().endNow)
    }

    @Test func aDeadlineComesBeforeRunnersSourcesAndStops() {
        var machine = hosting()
        _ = machine.spawn("a")
        _ = machine.startSources {}
        _ = machine.askToStop(gracePeriod: .seconds(1))
        #expect(machine.deadlineFired().endNow == false)
        #expect(next(&machine) == "deadline")
    }

    @Test func aDeadlineOnceTheHostIsClosingEndsRunsWaitAtOnce() {
        var machine = coordinating()
        _ = machine.finish()
        let (wake, endNow) = machine.deadlineFired()
        #expect(describe(wake) == "none" && endNow)
    }

    @Test func sourcesStartAsACommandAndKeepTheHostingTaskUntilTheyEnd() {
        var machine = Machine()
        #expect(describe(machine.startSources {}) == "launch")
        #expect(next(&machine) == "startSources")
        #expect(next(&machine) == "parked")
        #expect(describe(machine.sourcesEnded()) == "resume w nil")
    }

    @Test func sourcesAskedForAfterAStopNeverStart() {
        var machine = hosting()
        _ = machine.askToStop(gracePeriod: .seconds(1))
        _ = machine.startSources {}
        #expect([next(&machine), next(&machine), next(&machine)] == ["stop(1.0 seconds)", "quiescent", "parked"])
    }

    @Test func aHostingTaskWithNothingToDoEnds() {
        var machine = coordinating()
        _ = machine.nextJob(first: true)
        _ = machine.nextJob(first: false)
        _ = machine.startSources {}
        _ = next(&machine)
        _ = machine.sourcesEnded()
        #expect(next(&machine) == "end")
        #expect(!machine.hasTask)
    }

    @Test func runsHostingTaskIsLaunchedOnceAndStaysWhenIdle() {
        var machine = Machine()
        let (first, second) = (machine.launchKeepingTask(), machine.launchKeepingTask())
        #expect(first && !second)
        #expect(next(&machine) == "parked")
    }

    @Test func finishingClosesTheHostAndReportsADeadlineNotTaken() {
        var machine = hosting()
        _ = machine.spawn("a")
        _ = machine.deadlineFired()
        let (cancel, endNow) = machine.finish()
        #expect(cancel == ["a"] && endNow)
        #expect(machine.spawn("b").cancel == "b")
    }

    @Test func theEndReleasesItsWaitersOnceAndLaterWaitersPassAtOnce() {
        var machine = Machine(shutdown: Host.Shutdown(stopping: {}, deadline: {}, cancelled: {}))
        let endedBefore = machine.awaitEnd("e1")
        #expect(!endedBefore)
        #expect(machine.end().waiters == ["e1"])
        #expect(machine.shutdown == nil)
        #expect(machine.end().waiters.isEmpty)
        let endedAfter = machine.awaitEnd("e2")
        #expect(endedAfter)
    }

    @Test func aTimerIsKeptUntilTheEndAndRefusedAfterIt() {
        var machine = Machine()
        let timer = Task<Void, Never> {}
        let kept = machine.keep(timer)
        #expect(kept)
        #expect(machine.end().timers.count == 1)
        let keptAfterTheEnd = machine.keep(timer)
        #expect(!keptAfterTheEnd)
    }
}
