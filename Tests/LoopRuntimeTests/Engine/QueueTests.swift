import Testing

@testable import LoopRuntime

/// The runtime's one first-in first-out queue (a loop's inbox, a key's waiting effects, a host's jobs, a
/// durable group's entities, a key window's order).
@Suite struct QueueTests {
    @Test func aBacklogKeepsItsOrderAcrossRefills() {
        var queue = Queue<String>()
        for index in 0..<3_000 { queue.append("\(index)") }
        var taken: [String] = []
        for _ in 0..<2_000 { taken.append(queue.popFirst() ?? "") }
        queue.append("3000")
        #expect(taken == (0..<2_000).map { "\($0)" })
        #expect(queue.count == 1_001)
        #expect(queue.elements == (2_000...3_000).map { "\($0)" })
        #expect(queue.removeAll() == (2_000...3_000).map { "\($0)" })
        #expect(queue.isEmpty)
        #expect(queue.popFirst() == nil)
    }

    @Test func appendsBetweenTakesComeAfterWhatWasThere() {
        var queue = Queue<Int>()
        var taken: [Int] = []
        for round in 0..<50 {
            for index in 0..<3 { queue.append(round * 3 + index) }
            if let first = queue.popFirst() { taken.append(first) }
        }
        while let next = queue.popFirst() { taken.append(next) }
        #expect(taken == Array(0..<150))
    }

    @Test func anEmptiedQueueGivesBackTheBuffersOfABurstAndKeepsSmallOnes() {
        var queue = Queue<Int>()
        for index in 0..<1_000 { queue.append(index) }
        while queue.popFirst() != nil {}
        #expect(queue.incoming.capacity <= Queue<Int>.keptCapacity)
        #expect(queue.outgoing.capacity <= Queue<Int>.keptCapacity)

        queue.append(1)
        #expect(queue.popFirst() == 1)
        let kept = queue.incoming.capacity + queue.outgoing.capacity
        #expect(kept > 0)
    }

    @Test func aQueueReleasedWhenEmptyKeepsNoBufferAndANonEmptyOneKeepsItsElements() {
        // A new loop's first event is queued while its creator starts it: the loop then idles, maybe for
        // hours, and must not keep that event's buffer.
        var queue = Queue<Int>()
        queue.append(7)
        queue.releaseBuffersIfEmpty()
        #expect(queue.elements == [7])
        #expect(queue.popFirst() == 7)
        #expect(queue.incoming.capacity + queue.outgoing.capacity > 0)
        queue.releaseBuffersIfEmpty()
        #expect(queue.incoming.capacity == 0 && queue.outgoing.capacity == 0)
    }

    @Test func underASteadyLoadBothBuffersAreReused() {
        var queue = Queue<Int>()
        for index in 0..<100 { queue.append(index) }
        #expect(queue.popFirst() == 0)
        for index in 100..<200 { queue.append(index) }
        for expected in 1..<100 { #expect(queue.popFirst() == expected) }
        // The front ran out while more waited: its buffer stays for the next refill.
        #expect(queue.outgoing.isEmpty && queue.outgoing.capacity >= 99)
        #expect(queue.popFirst() == 100)
        #expect(queue.incoming.capacity >= 99)
    }

    @Test func anElementTakenLeavesTheQueueAtOnce() {
        final class Payload {}
        weak var watched: Payload?
        var queue = Queue<Payload>()
        do {
            let payload = Payload()
            watched = payload
            queue.append(payload)
            queue.append(Payload())
        }
        _ = queue.popFirst()
        #expect(watched == nil)
        #expect(queue.count == 1)
    }
}
