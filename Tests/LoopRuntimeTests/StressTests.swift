import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

@Suite struct StressTests {
    struct Tally: Equatable, Sendable {
        var last = [Int](repeating: -1, count: 4)
        var outOfOrder = 0
        var count = 0
    }

    struct Sent: Equatable, Sendable {
        var sender: Int
        var sequence: Int
    }

    /// Four threads send 250,000 events each at once: every event is processed exactly once and each
    /// sender's events in the order it sent them.
    @Test func fourSendersLoseNothingAndKeepTheirOrder() async throws {
        let update = Update<Tally, Sent, Never> { tally, event in
            if event.sequence != tally.last[event.sender] + 1 { tally.outOfOrder += 1 }
            tally.last[event.sender] = event.sequence
            tally.count += 1
            return []
        }
        let loop = Loop(program: Program(first: First(state: Tally()), update: update), effects: EffectRouter())
        let perSender = 250_000
        let rejected = Atomic<Int>(0)
        let report = try await running(loop) {
            let threads = (0..<4).map { sender in
                OSThread {
                    for sequence in 0..<perSender where !loop.send(Sent(sender: sender, sequence: sequence)).isAccepted
                    {
                        rejected.add(1, ordering: .relaxed)
                    }
                }
            }
            for thread in threads { thread.join() }
        }
        #expect(rejected.load(ordering: .relaxed) == 0)
        #expect(
            loop.state == Tally(last: Array(repeating: perSender - 1, count: 4), outOfOrder: 0, count: 4 * perSender)
        )
        #expect(report.eventsSent == 4 * perSender)
        #expect(report.eventsProcessed == 4 * perSender)
    }

    /// The loop does not copy its state per event: an array in the state keeps its buffer while
    /// events append to it through the running loop.
    @Test func theRunningLoopAppliesEventsWithoutCopyingTheState() async throws {
        var items: [Int] = []
        items.reserveCapacity(10_000)
        let update = Update<[Int], Int, Never> { items, value in
            items.append(value)
            return []
        }
        let loop = Loop(program: Program(first: First(state: consume items), update: update), effects: EffectRouter())
        var moved = 0
        _ = try await running(loop) {
            var previous = loop.state.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
            for value in 0..<5_000 {
                loop.send(value)
                let current = loop.state.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
                if current != previous { moved += 1 }
                previous = current
            }
        }
        #expect(moved == 0)
        #expect(loop.state.count == 5_000)
    }

    /// Runs `loop`, performs `body`, then stops it with no grace period: effects still in flight are
    /// cancelled.
    static func run(
        _ loop: Loop<Jobs.State, Jobs.Event, Jobs.Effect>,
        _ body: () -> Void
    ) async throws -> LoopReport {
        try await withThrowingTaskGroup(of: LoopReport.self) { group in
            group.addTask { try await loop.run() }
            while !loop.isRunning { await Task.yield() }
            body()
            loop.stop(gracePeriod: .zero)
            return try await group.next() ?? LoopReport()
        }
    }
}
