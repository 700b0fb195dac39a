import LoopTesting
import Testing

@Suite struct DifferenceTests {
    typealias Job = Jobs.Job
    typealias State = Jobs.State

    @Test func equalValuesHaveNoDifferences() {
        let state = State(jobs: [Job(name: "a", status: .queued, owner: "x")], limits: ["a": 1], tags: ["t"])
        #expect(Difference.between(state, state, at: "state") == [])
    }

    @Test func aChangedFieldIsNamedByItsPath() {
        let expected = State(paused: true)
        let actual = State(paused: false)
        #expect(
            Difference.between(expected, actual, at: "state") == [
                Difference(path: "state.paused", expected: "true", actual: "false")
            ]
        )
    }

    @Test func nestedFieldsAreReachedThroughCollectionsAndEnumPayloads() {
        let expected = State(jobs: [Job(name: "a", status: .queued), Job(name: "b", status: .running(attempt: 2))])
        let actual = State(jobs: [Job(name: "a", status: .queued), Job(name: "b", status: .running(attempt: 1))])
        #expect(
            Difference.between(expected, actual, at: "state")
                == [Difference(path: "state.jobs[1].status.running.attempt", expected: "2", actual: "1")]
        )
    }

    @Test func aDifferentEnumCaseShowsBothCases() {
        let found = Difference.between(Jobs.Status.queued, .failed(reason: "exit 3", attempts: 2), at: "status")
        #expect(
            found == [
                Difference(path: "status", expected: ".queued", actual: #".failed(reason: "exit 3", attempts: 2)"#)
            ]
        )
    }

    @Test func labelledPayloadsAreNamedByTheirLabels() {
        let found = Difference.between(
            Jobs.Status.failed(reason: "a", attempts: 1),
            .failed(reason: "b", attempts: 1),
            at: "s"
        )
        #expect(found == [Difference(path: "s.failed.reason", expected: #""a""#, actual: #""b""#)])
    }

    @Test func optionalsDifferByPresenceThenByContents() {
        #expect(
            Difference.between(
                Job(name: "a", status: .queued, owner: "x"),
                Job(name: "a", status: .queued, owner: nil),
                at: "job"
            )
                == [Difference(path: "job.owner", expected: #""x""#, actual: "nil")]
        )
        #expect(
            Difference.between(
                Job(name: "a", status: .queued, owner: "x"),
                Job(name: "a", status: .queued, owner: "y"),
                at: "job"
            )
                == [Difference(path: "job.owner", expected: #""x""#, actual: #""y""#)]
        )
    }

    @Test func anInsertedElementIsReportedAloneNotAsAShiftOfEveryLaterElement() {
        let found = Difference.between([1, 2, 3, 4], [1, 2, 99, 3, 4], at: "values")
        #expect(
            found == [
                Difference(path: "values.count", expected: "4", actual: "5"),
                Difference(path: "values[2]", expected: "nothing", actual: "99"),
            ]
        )
    }

    @Test func aRemovedElementIsReportedAtItsExpectedIndex() {
        let found = Difference.between(["a", "b", "c"], ["a", "c"], at: "effects")
        #expect(
            found == [
                Difference(path: "effects.count", expected: "3", actual: "2"),
                Difference(path: "effects[1]", expected: #""b""#, actual: "nothing"),
            ]
        )
    }

    @Test func dictionariesAreComparedKeyByKeyInKeyOrder() {
        let found = Difference.between(["b": 2, "a": 1, "c": 3], ["a": 1, "b": 20, "d": 4], at: "limits")
        #expect(
            found == [
                Difference(path: #"limits["b"]"#, expected: "2", actual: "20"),
                Difference(path: #"limits["c"]"#, expected: "3", actual: "nothing"),
                Difference(path: #"limits["d"]"#, expected: "nothing", actual: "4"),
            ]
        )
    }

    @Test func setsAreComparedByMembership() {
        let found = Difference.between(Set(["x", "y"]), Set(["y", "z"]), at: "tags")
        #expect(
            found == [
                Difference(path: #"tags contains "x""#, expected: "true", actual: "false"),
                Difference(path: #"tags contains "z""#, expected: "false", actual: "true"),
            ]
        )
    }

    @Test func manyDifferencesAreCappedWithASummary() {
        let found = Difference.between(Array(0..<100), Array(100..<200), at: "v")
        #expect(found.count == 65)
        #expect(found.last == Difference(path: "…", expected: "36 more differences", actual: "not listed"))
    }

    @Test func descriptionReadsAsOneLine() {
        #expect(
            Difference(path: "state.count", expected: "2", actual: "1").description
                == "state.count: expected 2, actual 1"
        )
    }
}
