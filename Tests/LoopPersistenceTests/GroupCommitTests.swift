import LoopPersistence
import Testing

/// The queue in front of a store's writer, as a value: one writer at a time, batches in order.
@Suite struct GroupCommitTests {
    @Test func theFirstWriteSchedulesTheWriterAndLaterOnesWaitForIt() {
        var commits = GroupCommit<Int>()
        let first = commits.enqueue(1)
        let second = commits.enqueue(2)
        #expect(first && !second)
        #expect(commits.writing)
        #expect(commits.count == 2)
    }

    @Test func theWriterTakesEverythingWaitingAsOneBatch() {
        var commits = GroupCommit<Int>()
        _ = commits.enqueue(1)
        _ = commits.enqueue(2)
        let batch = commits.nextBatch()
        #expect(batch == [1, 2])
        #expect(commits.count == 0)
        #expect(commits.writing)
    }

    @Test func aLimitedBatchTakesTheOldestAndLeavesTheRestInOrder() {
        var commits = GroupCommit<Int>()
        for write in 1...5 { _ = commits.enqueue(write) }
        var batches: [[Int]] = []
        while let batch = commits.nextBatch(limit: 2) { batches.append(batch) }
        #expect(batches == [[1, 2], [3, 4], [5]])
        #expect(!commits.writing)
        // A limit below one still takes one: a writer always makes progress.
        _ = commits.enqueue(6)
        let one = commits.nextBatch(limit: 0)
        #expect(one == [6])
    }

    @Test func theWriterEndsWhenNothingWaitsAndTheNextWriteSchedulesANewOne() {
        var commits = GroupCommit<Int>()
        _ = commits.enqueue(1)
        _ = commits.nextBatch()
        let last = commits.nextBatch()
        #expect(last == nil)
        #expect(!commits.writing)
        let scheduled = commits.enqueue(2)
        #expect(scheduled)
    }

    @Test func writesArrivingDuringABatchGoInTheNextOneWithoutANewWriter() {
        var commits = GroupCommit<Int>()
        _ = commits.enqueue(1)
        _ = commits.nextBatch()
        let scheduled = [commits.enqueue(2), commits.enqueue(3)]
        #expect(scheduled == [false, false])
        let next = commits.nextBatch()
        #expect(next == [2, 3])
    }

    @Test func writesTakenOutToFailLeaveTheWriterToEndAtItsNextTurn() {
        var commits = GroupCommit<Int>()
        _ = commits.enqueue(1)
        _ = commits.enqueue(2)
        let failed = commits.removeAll()
        #expect(failed == [1, 2])
        #expect(commits.writing)
        let scheduled = commits.enqueue(3)
        #expect(!scheduled)
        let failedLater = commits.removeAll()
        #expect(failedLater == [3])
        let next = commits.nextBatch()
        #expect(next == nil)
        #expect(!commits.writing)
    }
}
