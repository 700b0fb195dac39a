import Foundation
import Testing

/// A journaled `loop-demo` killed with SIGKILL at random points: each time, the journal replays, and
/// holds every event the process had acknowledged as journaled before the kill.
@Suite(.serialized) struct DurabilityTests {
    /// SplitMix64: a small seeded generator, so the kill points are the same on every run.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var value = state
            value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
            value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
            return value ^ (value >> 31)
        }
    }

    @Test func twentyKillsAtRandomPointsLeaveJournalsHoldingEveryAcknowledgedEvent() async throws {
        var random = Seeded(state: 2026_11_22)
        let jobs = (1...40).map { "run j\($0) -- true" }.joined(separator: "\n")
        for round in 1...20 {
            let scratch = Demo.scratch("durability\(round)")
            defer { try? FileManager.default.removeItem(atPath: scratch) }
            let acknowledgedAtLeast = Int.random(in: 1...60, using: &random)
            let script = """
                mkfifo '\(scratch)/in'
                "$DEMO" --stdin --journal '\(scratch)/j.jsonl' --acks < '\(scratch)/in' > /dev/null 2> '\(scratch)/acks' &
                pid=$!
                exec 3> '\(scratch)/in'
                printf '%s\\n' '\(jobs)' >&3
                until [ "$(grep -c journaled '\(scratch)/acks')" -ge \(acknowledgedAtLeast) ]; do sleep 0.005; done
                kill -9 $pid
                wait $pid
                echo "killed=$?"
                exec 3>&-
                """
            let killed = try await Demo.sh(script)
            #expect(killed.output.contains("killed=137"), "round \(round): \(killed.output)")
            let acknowledged =
                Demo.read("\(scratch)/acks").split(separator: "\n")
                .compactMap { $0.hasPrefix("journaled ") ? Int($0.dropFirst("journaled ".count)) : nil }.max() ?? 0
            #expect(acknowledged >= acknowledgedAtLeast)
            let replay = try await Demo.sh("\"$DEMO\" replay '\(scratch)/j.jsonl'")
            #expect(replay.status == 0, "round \(round): \(replay.output)")
            let replayed =
                replay.output.split(separator: "\n").first { $0.hasPrefix("replayed ") }
                .flatMap { Int($0.split(separator: " ")[1]) } ?? -1
            #expect(replayed >= acknowledged, "round \(round): replayed \(replayed), acknowledged \(acknowledged)")
        }
    }
}
