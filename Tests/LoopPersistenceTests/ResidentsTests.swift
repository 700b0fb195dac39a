import LoopRuntime
import Testing

@testable import LoopPersistence

/// The line of a durable group's live entities, which passivation takes the oldest from.
@Suite struct ResidentsTests {
    @Test func theOldestComesFirstAndABusyOnePutBackGoesLast() {
        var residents = Residents<String>()
        for id in ["a", "b", "c"] { residents.touch(id) }
        #expect(residents.popOldest() == "a")
        residents.requeue("a")
        #expect(residents.popOldest() == "b")
        #expect(residents.popOldest() == "c")
        #expect(residents.popOldest() == "a")
        #expect(residents.popOldest() == nil)
        #expect(residents.count == 3)
    }

    @Test func anEntityForgottenAndBackIsTheNewestNotTheOldest() {
        var residents = Residents<String>()
        for id in ["a", "b"] { residents.touch(id) }
        residents.forget("a")
        residents.touch("a")
        #expect(residents.popOldest() == "b")
        #expect(residents.popOldest() == "a")
        #expect(residents.popOldest() == nil)
    }

    @Test func theLineStaysWithinTwiceTheLiveEntitiesWhenNothingIsTakenFromIt() {
        // Passivation by idleness alone never takes from the line; entities come and go.
        var residents = Residents<Int>()
        for id in 0..<100_000 {
            residents.touch(id)
            if id >= 10 { residents.forget(id - 10) }
            if id % 7 == 0 { residents.requeue(id) }
        }
        #expect(residents.count == 10)
        #expect(residents.order.count <= 2 * residents.count + 1_025)
        var oldest: [Int] = []
        while let id = residents.popOldest() { oldest.append(id) }
        #expect(Set(oldest) == Set(99_990..<100_000))
    }

    @Test func aSweepReturnsTheEntitiesThatGotNothingDuringAWholeSweep() {
        var residents = Residents<String>()
        residents.touch("quiet")
        residents.touch("busy")
        #expect(residents.advance().isEmpty)
        residents.touch("busy")
        #expect(residents.advance() == ["quiet"])
    }
}
