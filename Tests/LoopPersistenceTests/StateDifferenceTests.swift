import Testing

@testable import LoopPersistence

/// The lines a replay report shows where a recorded state and a replayed one differ.
@Suite struct StateDifferenceTests {
    enum Status: Equatable {
        case queued
        case running(attempt: Int)
        case done
    }

    struct Job: Equatable {
        var name: String
        var status: Status
    }

    struct Board: Equatable {
        var jobs: [Job]
        var owners: [String: Int]
        var note: String?
        var total = 0
    }

    let board = Board(
        jobs: [Job(name: "a", status: .queued), Job(name: "b", status: .running(attempt: 1))],
        owners: ["ann": 1, "bob": 2],
        note: nil
    )

    @Test func equalValuesHaveNoDifference() {
        #expect(StateDifference.lines(from: board, to: board).isEmpty)
    }

    @Test func aFieldDeepInsideIsNamedByItsPath() {
        var changed = board
        changed.total = 3
        changed.jobs[1].status = .running(attempt: 2)
        #expect(
            StateDifference.lines(from: board, to: changed) == [
                "jobs[1].status.running.attempt: 1 → 2", "total: 0 → 3",
            ]
        )
    }

    @Test func anotherCaseOrAnOptionalSetIsShownWhole() {
        var changed = board
        changed.jobs[0].status = .done
        changed.note = "late"
        #expect(
            StateDifference.lines(from: board, to: changed) == [
                "jobs[0].status: queued → done", #"note: nil → Optional("late")"#,
            ]
        )
    }

    @Test func collectionsShowTheirCountAndDictionariesTheirKeys() {
        var changed = board
        changed.jobs.append(Job(name: "c", status: .queued))
        changed.owners["ann"] = nil
        changed.owners["bob"] = 3
        changed.owners["cy"] = 4
        #expect(
            StateDifference.lines(from: board, to: changed) == [
                "jobs.count: 2 → 3", "owners[ann]: 1 → absent", "owners[bob]: 2 → 3", "owners[cy]: absent → 4",
            ]
        )
    }

    @Test func aPlainValueAndTheLimit() {
        #expect(StateDifference.lines(from: 1, to: 2) == ["the state: 1 → 2"])
        #expect(StateDifference.lines(from: Array(0..<20), to: Array(1..<21), limit: 3).count == 3)
    }
}
