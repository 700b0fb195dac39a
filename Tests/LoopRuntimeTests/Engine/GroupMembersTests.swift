import EffectHandlers
import LoopCore
import Testing

@testable import LoopRuntime

/// The group's state machine as a value: every transition of ``GroupMembers/Phase``, with the loops
/// it holds, one `#expect` each.
@Suite struct GroupMembersTests {
    typealias Members = GroupMembers<String, Int, Int, Never>
    typealias Member = Loop<Int, Int, Never>

    let host = Host(clock: ContinuousClock())
    let context = LoopContext<Int, Int, Never>(
        router: EffectRouter(),
        sources: [],
        sink: nil,
        clock: ContinuousClock(),
        inbox: .unbounded
    )

    func loop(_ id: String) -> Member {
        Loop(
            program: Program(
                first: First(state: 0),
                update: Update { total, value in
                    total += value
                    return []
                }
            ),
            context: context,
            entity: id,
            group: nil
        )
    }

    func isInserted(_ insertion: Members.Insertion, claimed: Bool) -> Bool {
        if case .inserted(.accepted, let first) = insertion { (first != nil) == claimed } else { false }
    }

    @Test func aCreatedGroupCreatesLoopsThatQueueUntilItRuns() {
        var members = Members()
        let created = loop("a")
        #expect(members.lookup("a") == .absent)
        #expect(isInserted(members.insert(created, for: "a", event: 1), claimed: false))
        #expect(members.lookup("a") == .found(created))
        #expect(created.report.eventsQueued == 1 && !created.isRunning)
    }

    @Test func startingClaimsEveryLoopCreatedSoFar() throws {
        var members = Members()
        _ = members.insert(loop("a"), for: "a", event: 1)
        _ = members.insert(loop("b"), for: "b", event: 2)
        let (started, _) = try members.start(host)
        #expect(started.count == 2 && started.allSatisfy { $0.0.isRunning })
        #expect(members.isRunning)
        #expect(throws: LoopError.alreadyRunning) { _ = try members.start(host) }
    }

    @Test func aLoopCreatedWhileRunningIsClaimedInTheSameStep() throws {
        var members = Members()
        _ = try members.start(host)
        let created = loop("a")
        #expect(isInserted(members.insert(created, for: "a", event: 1), claimed: true))
        #expect(created.isRunning)
    }

    @Test func aLoopIsTakenOutOnlyIfItsStopSaysSoAndItsEndReturnsEveryLoop() {
        var members = Members()
        _ = members.insert(loop("a"), for: "a", event: 1)
        #expect(members.removeIf("a") { _ in Int?.none } == nil)
        #expect(members.count == 1 && members.ids == ["a"])
        let removed = members.removeIf("a") { _ in 7 }
        #expect(removed?.1 == 7 && members.loop(for: "a") == nil)
        #expect(members.count == 0 && members.reporting.loops.count == 1)
        #expect(members.end().count == 1)
    }

    @Test func aLoopInsertedTwiceLosesToTheFirst() {
        var members = Members()
        let first = loop("a")
        _ = members.insert(first, for: "a", event: 1)
        let second = members.insert(loop("a"), for: "a", event: 2)
        guard case .found(let found) = second else { return #expect(Bool(false), "expected .found") }
        #expect(found === first)
    }

    @Test func stoppingACreatedGroupStopsItForGood() {
        var members = Members()
        let created = loop("a")
        _ = members.insert(created, for: "a", event: 1)
        let stop = members.stop()
        #expect(stop?.host == nil && stop?.loops.count == 1 && stop?.first == true)
        #expect(members.lookup("b") == .rejected(.stopped))
        #expect(throws: LoopError.alreadyStopped) { _ = try members.start(host) }
    }

    @Test func stoppingARunningGroupRejectsNewIdsAndCountsThem() throws {
        var members = Members()
        _ = try members.start(host)
        let first = members.stop()
        #expect(first?.host === host && first?.first == true)
        #expect(members.lookup("new") == .rejected(.stopping))
        #expect(members.insert(loop("new"), for: "new", event: 1) == .rejected(.stopping))
        #expect(members.finished.eventsRejected == 2 && members.finished.eventsSent == 2)
        let again = members.stop()
        #expect(again?.host === host && again?.first == false && again?.loops.isEmpty == true)
        #expect(members.end().isEmpty)
        #expect(members.stop() == nil)
        #expect(members.lookup("new") == .rejected(.stopped))
    }

    @Test func aRemovedLoopRetiresAndItsIdIsFreeAtOnce() throws {
        var members = Members()
        let old = loop("a")
        _ = members.insert(old, for: "a", event: 1)
        #expect(members.remove("a") === old)
        #expect(members.lookup("a") == .absent)
        #expect(members.all.count == 1)
        var report = LoopReport()
        report.eventsProcessed = 1
        members.release(old, report: report)
        #expect(members.all.isEmpty && members.finished.eventsProcessed == 1)
    }
}

extension GroupMembers.Lookup: Equatable {
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.found(let left), .found(let right)): left === right
        case (.absent, .absent): true
        case (.rejected(let left), .rejected(let right)): left == right
        default: false
        }
    }
}

extension GroupMembers.Insertion: Equatable {
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.found(let left), .found(let right)): left === right
        case (.inserted(let left, let leftFirst), .inserted(let right, let rightFirst)):
            left == right && (leftFirst == nil) == (rightFirst == nil)
        case (.rejected(let left), .rejected(let right)): left == right
        default: false
        }
    }
}
