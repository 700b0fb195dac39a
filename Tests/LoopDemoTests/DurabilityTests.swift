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
                # Until enough acknowledgements, or the demo is gone (then the checks below fail, never hang).
                until [ "$(grep -c journaled '\(scratch)/acks')" -ge \(acknowledgedAtLeast) ] || ! kill -0 $pid 2>/dev/null; do sleep 0.005; done
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

    /// A durable run (`--store`) killed with SIGKILL twice at seeded points, then run to the end: the
    /// final summary lists every job whose submission was acknowledged exactly once, all succeeded; a job
    /// reported finished before a kill never ran again (each job's command appends its name to a log,
    /// so runs are counted, not assumed); a job running at a kill ran again (at least once).
    @Test func twentyKilledDurableRunsContinueWhereTheyStopped() async throws {
        var random = Seeded(state: 2026_11_23)
        let names = (1...12).map { "j\($0)" }
        var resumed = 0
        for round in 1...20 {
            let scratch = Demo.scratch("store\(round)")
            defer { try? FileManager.default.removeItem(atPath: scratch) }
            let log = "\(scratch)/ran.log"
            let jobs = names.enumerated().map { index, name in
                "run \(name) -- sleep 0.0\(index % 4 + 1); echo \(name) >> '\(log)'"
            }
            .joined(separator: "\n")
            // Kill once this many lines of the run's output are out: a point between the first
            // acknowledgement and the end, different in every round.
            let firstKill = Int.random(in: 1...30, using: &random)
            let secondKill = Int.random(in: 1...12, using: &random)
            let first = try await Demo.sh(
                """
                mkfifo '\(scratch)/in'
                "$DEMO" --stdin --store '\(scratch)/store' < '\(scratch)/in' > '\(scratch)/out1' 2>&1 &
                pid=$!
                exec 3> '\(scratch)/in'
                printf '%s\\n' '\(jobs.replacingOccurrences(of: "'", with: "'\\''"))' >&3
                until [ "$(wc -l < '\(scratch)/out1')" -ge \(firstKill) ] || ! kill -0 $pid 2>/dev/null; do sleep 0.005; done
                kill -9 $pid
                wait $pid
                echo "killed=$?"
                exec 3>&-
                """
            )
            #expect(first.output.contains("killed=137"), "round \(round): \(first.output)")
            let out1 = Demo.read("\(scratch)/out1")
            let ranAfterFirst = Self.counts(Demo.read(log))
            let second = try await Demo.sh(
                """
                "$DEMO" --stdin --store '\(scratch)/store' < /dev/null > '\(scratch)/out2' 2>&1 &
                pid=$!
                until [ "$(wc -l < '\(scratch)/out2')" -ge \(secondKill) ] || ! kill -0 $pid 2>/dev/null; do sleep 0.005; done
                kill -9 $pid 2>/dev/null
                wait $pid
                echo "status=$?"
                """
            )
            let out2 = Demo.read("\(scratch)/out2")
            let ranAfterSecond = Self.counts(Demo.read(log))
            let last = try await Demo.sh("\"$DEMO\" --stdin --store '\(scratch)/store' < /dev/null")
            resumed += (out2 + last.output).split(separator: "\n").count { $0.hasPrefix("resuming ") }
            #expect(last.status == 0, "round \(round): \(second.output)\n\(out2)\n\(last.output)")

            let acknowledged = Self.named(in: out1, after: "queued ")
            #expect(!acknowledged.isEmpty || firstKill <= 1, "round \(round): nothing acknowledged in \(out1)")
            // The summary's rows: the lines after its header, up to the counts.
            let rows = last.output.split(separator: "\n").drop { !$0.hasPrefix("job ") }.dropFirst()
                .prefix { $0.hasPrefix("j") }
            for name in acknowledged {
                let matching = rows.filter { $0.split(separator: " ").first.map(String.init) == name }
                #expect(matching.count == 1 && matching[0].hasSuffix("succeeded"), "round \(round): \(name) in \(rows)")
            }
            let final = Self.counts(Demo.read(log))
            for name in Self.named(in: out1, after: "", suffix: " succeeded") {
                #expect(final[name] == ranAfterFirst[name], "round \(round): \(name) ran again after the first kill")
            }
            for name in Self.named(in: out2, after: "", suffix: " succeeded") {
                #expect(final[name] == ranAfterSecond[name], "round \(round): \(name) ran again after the second kill")
            }
            for name in rows.compactMap({ $0.split(separator: " ").first.map(String.init) }) {
                #expect((final[name] ?? 0) >= 1, "round \(round): \(name) never ran")
            }
        }
        // The kill points land while jobs run: some restarts resumed running jobs.
        #expect(resumed > 0)
        print("durable kill test: \(resumed) running jobs resumed over 20 rounds")
    }

    /// A retry's backoff is a durable timer: the demo killed with SIGKILL during a 3.2 s backoff and
    /// started again retries at the due time recorded when the backoff began (not a whole backoff after
    /// its recovery, and never before it was due), once.
    @Test func aDemoKilledDuringABackoffRetriesAtTheRecordedDueTimeOnce() async throws {
        let scratch = Demo.scratch("backoff")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let (log, go) = ("\(scratch)/runs.log", "\(scratch)/go")
        // Each attempt of r writes when it ran; attempts 1-6 fail, the 7th succeeds. The backoff after the
        // 6th failure is 100 ms doubled five times: 3.2 s. Job s runs until the test lets it end: resumed
        // after the restart, its line says when the restarted demo has recovered.
        let jobs = [
            "run s -- while [ ! -f '\(go)' ]; do sleep 0.05; done",
            "run r --retries 10 -- date +%s.%N >> '\(log)'; [ \"$(wc -l < '\(log)')\" -ge 7 ]",
        ]
        .joined(separator: "\n")
        let first = try await Demo.sh(
            """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin --store '\(scratch)/store' < '\(scratch)/in' > '\(scratch)/out1' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            printf '%s\\n' '\(jobs.replacingOccurrences(of: "'", with: "'\\''"))' >&3
            # The 6th failure is recorded (its line is printed once it is): its backoff has begun. (At most
            # 60 s: a demo that never gets there fails the checks below, never hangs the test.)
            for i in $(seq 6000); do grep -q 'retry 6 of' '\(scratch)/out1' || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
            sleep 2.5
            kill -9 $pid
            wait $pid
            echo "killed=$?"
            exec 3>&-
            """
        )
        #expect(first.output.contains("killed=137"), "\(first.output)\n\(Demo.read("\(scratch)/out1"))")
        #expect(Demo.read(log).split(separator: "\n").count == 6, "\(Demo.read("\(scratch)/out1"))")
        // Each wait at most 60 s: a timer lost would leave r waiting for ever.
        let second = try await Demo.sh(
            """
            "$DEMO" --stdin --store '\(scratch)/store' < /dev/null > '\(scratch)/out2' 2>&1 &
            pid=$!
            for i in $(seq 6000); do grep -q 'resuming s' '\(scratch)/out2' || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
            date +%s.%N > '\(scratch)/recovered'
            for i in $(seq 6000); do [ "$(wc -l < '\(log)')" -ge 7 ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
            touch '\(go)'
            for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
            kill -0 $pid 2>/dev/null && { echo "still running after 60 s"; kill -9 $pid; }
            wait $pid
            """
        )
        #expect(second.status == 0, "\(second.output)\n\(Demo.read("\(scratch)/out2"))")
        let runs = Demo.read(log).split(separator: "\n").compactMap { Double($0) }
        let recovered = try #require(
            Double(Demo.read("\(scratch)/recovered").trimmingCharacters(in: .whitespacesAndNewlines))
        )
        try #require(runs.count == 7, "\(runs)\n\(Demo.read("\(scratch)/out2"))")
        // Never early: the 6th attempt ran before its failure was recorded, so the due time is later than
        // its start plus the backoff.
        #expect(runs[6] >= runs[5] + 3.2, "\(runs)")
        // Not a whole backoff again: due at most 0.7 s after the recovery (the kill came 2.5 s into the
        // backoff); a backoff derived again would start 3.2 s after it.
        #expect(runs[6] < recovered + 2, "retried \(runs[6] - recovered) s after the recovery")
    }

    /// How many lines of `log` hold each name.
    static func counts(_ log: String) -> [String: Int] {
        log.split(separator: "\n").reduce(into: [:]) { $0[String($1), default: 0] += 1 }
    }

    /// The job names on lines of `output` that start with `prefix` and end with `suffix`.
    static func named(in output: String, after prefix: String, suffix: String = "") -> Set<String> {
        Set(
            output.split(separator: "\n").compactMap { line in
                guard line.hasPrefix(prefix), line.hasSuffix(suffix) else { return nil }
                let name = line.dropFirst(prefix.count).dropLast(suffix.count)
                return name.hasPrefix("j") && name.dropFirst().allSatisfy(\.isNumber) ? String(name) : nil
            }
        )
    }
}
