import Foundation
import LoopCore
import LoopDemo
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Requests across the cluster under a crash: three `loop-demo node` processes; this test's process is
/// the fourth, a `ClusterClient` submitting jobs as keyed requests. One node is killed with SIGKILL
/// while requests are in flight, and started again; the client repeats each key it has no answer for
/// until every key has one.
@Suite("loop-demo nodes answering requests through a crash", .serialized)
struct ClusterRequestFaultTests {
    /// A `loop-demo node` process.
    final class Node: Sendable {
        let name: String
        let pid: Int32

        init(_ database: String, _ name: String) throws {
            var failure: Int32 = 0
            guard
                let pid = ChildProcess.spawn(
                    Demo.binary,
                    [Demo.binary, "node", "--postgres", database, "--name", name],
                    output: .discarded,
                    options: ChildProcess.Options(endsWithThisProcess: true),
                    failure: &failure
                )
            else { throw CodecError("cannot start loop-demo node (errno \(failure))") }
            self.name = name
            self.pid = pid
        }

        /// Sends `signal` and waits for the process to end (off Swift's threads: it may take a while).
        func stop(_ signal: Int32) async {
            let pid = self.pid
            _ = await offThePool { () -> Int32? in ChildProcess.stop(pid, with: signal) }
        }
    }

    static func query(_ database: String, _ sql: String) async throws -> String {
        try await TemporaryPostgres.psql(database, sql: sql).filter { !$0.isWhitespace }
    }

    /// Waits until `condition` holds (checked every 50 ms); fails the test after 120 s rather than hang.
    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<2_400 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("timed out waiting for \(what)")
    }

    /// The jobs of a seed: `count` of them, each a keyed request of its own.
    static let count = 40

    @Test(.timeLimit(.minutes(10)))
    func everyKeyIsAnsweredOnceWhileANodeIsKilledAndRestarted() async throws {
        for seed in 1...5 { try await Self.run(seed: seed) }
    }

    static func run(seed: Int) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        var nodes = try (1...3).map { try Node(database, "node-\($0)") }
        let client = try await ClusterClient(connecting: database, events: JSONCodec<JobRunner.Event>())
        // Stops every node this seed started, however it ends.
        func stopAll() async {
            for node in nodes { await node.stop(SIGTERM) }
        }
        do {
            try await eventually("each of the three nodes to own shards") {
                let owners = try await query(
                    database,
                    """
                    SELECT count(DISTINCT a.application_name) || '/' || count(*) FROM pg_locks l
                    JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
                      AND a.application_name LIKE 'effectloop node %'
                      -- This test's database only: other suites run clusters on the same server.
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """
                )
                return owners == "3/64"
            }
            let answers = Locked<[Int: [String]]>([:])
            let tries = Locked(0)
            func ask(_ index: Int, timeout: Duration) async -> Bool {
                tries.withLock { $0 += 1 }
                let spec = JobRunner.Spec(name: "s\(seed)-j\(index)", command: "true", retries: 0)
                do {
                    let answer: String = try await client.request(
                        to: "job-\(spec.name)",
                        key: "seed\(seed)-key\(index)",
                        timeout: timeout
                    ) { .request(spec, replyTo: $0) }
                    answers.withLock { $0[index, default: []].append(answer) }
                    return true
                } catch {
                    return false
                }
            }
            // The first tries, eight at a time: a seeded number of them answered first; then the rest, and
            // the victim dies once some of those are in flight.
            let victim = seed % 3
            let killAfter = 4 + seed * 3
            func firstTries(_ indices: Range<Int>) async {
                await withTaskGroup(of: Void.self) { group in
                    for index in indices {
                        if index - indices.lowerBound >= 8 { await group.next() }
                        // Shorter than a failover: the requests in flight when the node dies time out, and
                        // their repeats reach the entities while the first tries still wait in the inbox.
                        group.addTask { _ = await ask(index, timeout: .milliseconds(50)) }
                    }
                }
            }
            await firstTries(0..<killAfter)
            // Eight more in flight as the victim dies, and the rest sent while it is dead: those of its
            // shards wait for the failover.
            let inFlight = Task { await firstTries(killAfter..<(killAfter + 8)) }
            for _ in 0..<10_000 where tries.withLock({ $0 }) < killAfter + 4 {
                try await Task.sleep(for: .milliseconds(1))
            }
            await nodes[victim].stop(SIGKILL)
            await firstTries((killAfter + 8)..<count)
            await inFlight.value
            nodes[victim] = try Node(database, "node-\(victim + 1)")
            // The client repeats the keys it has no answer for, until each has one.
            for _ in 0..<60 {
                let have = answers.withLock { Set($0.keys) }
                let missing = (0..<count).filter { !have.contains($0) }
                if missing.isEmpty { break }
                await withTaskGroup(of: Void.self) { group in
                    for index in missing { group.addTask { _ = await ask(index, timeout: .milliseconds(300)) } }
                }
            }
            let repeated = tries.withLock { $0 } - count
            // And a repeat of every key now: the same answer, nothing applied again.
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<count { group.addTask { _ = await ask(index, timeout: .seconds(30)) } }
            }
            let all = answers.withLock { $0 }
            for index in 0..<count {
                let name = "s\(seed)-j\(index)"
                let got = all[index] ?? []
                #expect(!got.isEmpty, "seed \(seed): key \(index) never answered")
                #expect(Set(got) == ["queued \(name)"], "seed \(seed): key \(index) answered \(got)")
            }
            // The failover made keys repeat before they had an answer (else the test shows nothing).
            #expect(repeated > 0, "seed \(seed): no key was repeated")
            // Each job's request was recorded exactly once: none lost, none applied twice.
            let recorded = try await query(
                database,
                """
                SELECT count(*) FROM effectloop.events
                WHERE stream LIKE 'job-s\(seed)-j%' AND position(convert_to('"request"', 'UTF8') IN payload) > 0
                """
            )
            #expect(recorded == "\(count)", "seed \(seed): \(recorded) requests recorded for \(count) keys")
            let twice = try await query(
                database,
                """
                SELECT count(*) FROM (
                    SELECT stream FROM effectloop.events
                    WHERE position(convert_to('"request"', 'UTF8') IN payload) > 0 GROUP BY stream HAVING count(*) > 1
                ) t
                """
            )
            #expect(twice == "0", "seed \(seed): \(twice) jobs with their request applied twice")
            try await eventually("the inbox to drain") {
                try await query(database, "SELECT count(*) FROM effectloop.inbox") == "0"
            }
        } catch {
            await client.close()
            await stopAll()
            throw error
        }
        await client.close()
        await stopAll()
    }
}
