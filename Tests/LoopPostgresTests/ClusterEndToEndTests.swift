import Dispatch
import Foundation
import LoopPersistence
import LoopPostgres
import LoopSupport
import LoopTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A child process of the test: the built `loop-bench` in one of its cluster modes. Killed with SIGKILL
/// if still running when released, so no test leaves one behind.
final class Child: @unchecked Sendable {
    // @unchecked Sendable: `pid` and `exited` are only touched by the test's one task, in order.
    let pid: pid_t
    let log: String
    private var exited: Int32?
    /// Could not be waited for (`ECHILD`): exited, status unknown. Nothing else in this process reaps
    /// another's children, so this is a failure.
    private var gone = false

    static var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("loop-bench")
            .path
    }

    /// Starts `loop-bench` with `arguments`, through `wrapper` if given (`ip netns exec NAME`, which
    /// runs it as the same process).
    init(_ arguments: [String], log: String, wrapper: [String] = []) throws {
        self.log = log
        var failure: Int32 = 0
        let command = wrapper + [Self.binary] + arguments
        guard
            let pid = ChildProcess.spawn(
                command[0],
                command,
                output: .file(log),
                options: ChildProcess.Options(endsWithThisProcess: true),
                failure: &failure
            )
        else { throw CocoaError(.executableLoad) }
        self.pid = pid
    }

    /// Sends `signal`.
    func signal(_ signal: Int32) {
        if exited == nil && !gone { kill(pid, signal) }
    }

    /// Waits for the process to exit (polling, so a test's time limit can still end a hung one); its
    /// raw wait status, or `nil` if it could not be waited for.
    func wait() async -> Int32? {
        while exited == nil && !gone {
            var status: Int32 = 0
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid {
                exited = status
            } else if reaped < 0 && errno == ECHILD {
                gone = true
                return nil
            } else {
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        return exited
    }

    /// Whether it ended well: exit status 0.
    func endedWell(_ status: Int32?) -> Bool {
        status == 0
    }

    /// What it printed. Read with `read(2)`: Foundation's `String(contentsOfFile:)` leaks a buffer for
    /// an empty file under LeakSanitizer.
    var output: String {
        FileContents.text(at: log) ?? ""
    }

    deinit {
        if exited == nil && !gone {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }
}

@Suite("Cluster, end to end", .serialized)
struct ClusterEndToEndTests {
    static let sanitized = ProcessInfo.processInfo.environment["EFFECTLOOP_SANITIZED"] != nil
    /// 10,000 entities and 100,000 events from two producers; smaller under the sanitizers, whose
    /// builds are an order of magnitude slower.
    static let (entities, eventsPerProducer) = sanitized ? (500, 2_000) : (10_000, 50_000)

    /// Runs `sql` with `psql` (which waits on a thread outside Swift's concurrency pool: these tests
    /// poll the database in tight loops); its output, trimmed.
    static func query(_ database: String, _ sql: String) async throws -> String {
        try await TemporaryPostgres.psql(database, sql: sql).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func logDirectory(_ name: String) throws -> String {
        let logs = FileManager.default.temporaryDirectory.appendingPathComponent("effectloop-\(name)-\(getpid())").path
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true)
        return logs
    }

    /// How many shard locks the lock session of node `name` holds.
    static func shardLocks(of name: String, in database: String) async throws -> Int {
        Int(
            try await query(
                database,
                """
                SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
                  AND a.application_name = 'effectloop node \(name)'
                """
            )
        ) ?? 0
    }

    /// Checks `condition` every `interval`, at most `attempts` times; whether it came true. A guard
    /// against a hang, not a timing.
    static func poll(
        _ attempts: Int,
        every interval: Duration = .milliseconds(10),
        _ condition: () async throws -> Bool
    ) async throws -> Bool {
        for _ in 0..<attempts {
            if try await condition() { return true }
            try await Task.sleep(for: interval)
        }
        return false
    }

    /// The inbox is empty and every one of its `events` rows became exactly one event, with no gap and no
    /// duplicate version in any stream.
    static func expectEveryRowOnce(_ database: String, events: Int) async throws {
        #expect(try await query(database, "SELECT count(*) FROM effectloop.inbox") == "0")
        #expect(try await query(database, "SELECT count(*) FROM effectloop.events") == "\(events)")
        #expect(try await query(database, "SELECT count(DISTINCT inbox_id) FROM effectloop.events") == "\(events)")
        let broken = try await query(
            database,
            "SELECT count(*) FROM (SELECT stream FROM effectloop.events GROUP BY stream HAVING max(version) <> count(*) OR min(version) <> 1) s"
        )
        #expect(broken == "0")
    }

    /// A cluster node process on `database` (heartbeat 100 ms, membership timeout 1.5 s), logging to
    /// `logs/NAME.log`.
    static func node(_ name: String, database: String, logs: String) throws -> Child {
        try Child(
            [
                "cluster-node", "--postgres", database, "--name", name, "--heartbeat-ms", "100", "--timeout-ms", "1500",
            ],
            log: "\(logs)/\(name).log"
        )
    }

    /// 3 nodes, 2 producers, one node killed with SIGKILL at a point `seed` chooses and restarted; then
    /// every entity's state is the pure replay of the events sent to it, nothing lost or repeated.
    @Test(.timeLimit(.minutes(10)), arguments: sanitized ? [11] : [11, 23, 37, 41, 53])
    func killingANodeLosesAndRepeatsNothing(seed: Int) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        // The schema exists before the nodes start, so they do not race to install it.
        await (try PostgresInbox(connecting: database)).close()
        let logs = try Self.logDirectory("e2e-\(seed)")
        defer { try? FileManager.default.removeItem(atPath: logs) }
        func node(_ name: String) throws -> Child { try Self.node(name, database: database, logs: logs) }
        var nodes = try ["n1", "n2", "n3"].map(node)
        let producers = try (0..<2).map { producer in
            try Child(
                [
                    "cluster-send", "--postgres", database, "--producer", "\(producer)",
                    "--events", "\(Self.eventsPerProducer)", "--entities", "\(Self.entities)",
                ],
                log: "\(logs)/producer-\(producer).log"
            )
        }
        let total = 2 * Self.eventsPerProducer
        // The seeded point: once this many events are committed, a seeded node is killed.
        var generator = SplitMix(seed: UInt64(seed))
        let killAt = total / 10 + Int(generator.next() % UInt64(total / 2))
        let victim = Int(generator.next() % 3)
        var killed = false
        for _ in 0..<6_000 {
            let committed = Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0
            if committed >= killAt {
                killed = true
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(killed, "the cluster never committed \(killAt) events")
        nodes[victim].signal(SIGKILL)
        _ = await nodes[victim].wait()
        let restartedAt = try await Self.query(database, "SELECT now()")
        nodes[victim] = try node(["n1", "n2", "n3"][victim])
        // The restarted node has joined (a heartbeat from a session begun after its restart) before
        // anything else happens: the SIGTERM that ends the test must not come before the node catches it
        // (ci40: it came within milliseconds of the start, and the default disposition killed the node).
        var joined = false
        for _ in 0..<6_000 {
            let sessions = try await Self.query(
                database,
                """
                SELECT count(*) FROM effectloop.nodes
                WHERE node = '\(["n1", "n2", "n3"][victim])' AND session_start > '\(restartedAt)'
                """
            )
            if sessions == "1" {
                joined = true
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(joined, "the restarted node never joined")
        for producer in producers {
            let status = await producer.wait()
            #expect(producer.endedWell(status), "a producer failed: \(producer.output)")
        }
        for _ in 0..<6_000 {
            let committed = Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0
            if committed >= total { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        for child in nodes { child.signal(SIGTERM) }
        for child in nodes {
            let status = await child.wait()
            #expect(child.endedWell(status), "a node did not stop cleanly: \(child.output)")
        }
        // Processed equals accepted: every inbox row became exactly one event.
        try await Self.expectEveryRowOnce(database, events: total)
        // Each entity's state, replayed from its stream (each payload is the inbox row's id, 9 bytes, then
        // the event's JSON), is the pure replay of what was sent to it.
        var expected = [Int](repeating: 0, count: Self.entities)
        for producer in 0..<2 {
            for index in 0..<Self.eventsPerProducer {
                let (entity, amount) = ClusterTally.event(index, producer: producer, entities: Self.entities)
                expected[entity] += amount
            }
        }
        let sums = try await Self.query(
            database,
            """
            SELECT string_agg(stream || '=' || total, ',') FROM (
                SELECT stream, sum((convert_from(substring(payload FROM 10), 'UTF8')::json -> 'add' ->> '_0')::int) AS total
                FROM effectloop.events GROUP BY stream) s
            """
        )
        var actual = [Int](repeating: 0, count: Self.entities)
        for pair in sums.split(separator: ",") {
            let parts = pair.split(separator: "=")
            if parts.count == 2, let entity = Int(parts[0].dropFirst("entity-".count)), let value = Int(parts[1]) {
                actual[entity] = value
            }
        }
        #expect(actual == expected)
    }
}

extension ClusterEndToEndTests {
    /// A node paused (SIGSTOP) while its entities' appends are under way, its lock session cut by the
    /// server (a partition the server noticed): the other node takes its shards. Resumed, the stale
    /// node's appends are fenced and its session ends; it joins again as a new session. The rightful
    /// owner is never stopped, and every event is committed exactly once.
    @Test(.timeLimit(.minutes(10)), arguments: sanitized ? [11] : [11, 23, 37, 41, 53])
    func aPausedNodeWhoseSessionIsCutIsFencedAndTheOwnerGoesOn(seed: Int) async throws {
        try await pause(seed: seed, cutTheSession: true)
    }

    /// A node paused (SIGSTOP) with its session intact, so it still holds its shard locks: its lease
    /// expires after the membership timeout without a heartbeat, the other node ends its lock session
    /// and takes its shards. Resumed, it commits nothing stale, and joins again; the owner goes on.
    @Test(.timeLimit(.minutes(10)), arguments: sanitized ? [11] : [11, 23, 37, 41, 53])
    func aPausedNodeLosesItsShardsWhenItsLeaseExpires(seed: Int) async throws {
        try await pause(seed: seed, cutTheSession: false)
    }

    /// A node restarted under its name while the old process lingers (paused, its session intact): the
    /// new one ends its predecessor's session and takes the shards at once, without waiting for a
    /// lease; the old one, resumed, finds its name taken and stops (it does not join again).
    @Test(.timeLimit(.minutes(5)))
    func aRestartedNodeEndsItsLingeringPredecessor() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        await (try PostgresInbox(connecting: database)).close()
        let logs = try Self.logDirectory("restart")
        defer { try? FileManager.default.removeItem(atPath: logs) }
        func locks() async throws -> Int { try await Self.shardLocks(of: "a", in: database) }
        func waitForEveryShard() async throws -> Bool {
            for _ in 0..<3_000 {
                if try await locks() == 64 { return true }
                try await Task.sleep(for: .milliseconds(10))
            }
            return false
        }
        let old = try Self.node("a", database: database, logs: logs)
        #expect(try await waitForEveryShard(), "the first node never took the shards")
        // Both processes name their session 'effectloop node a': the old one is told apart by its pid.
        let named = "SELECT pid FROM pg_stat_activity WHERE application_name = 'effectloop node a'"
        let predecessor = try await Self.query(database, named)
        try #require(Int(predecessor) != nil, "the first node has no single session: \(predecessor)")
        old.signal(SIGSTOP)
        let restarted = try Child(
            [
                "cluster-node", "--postgres", database, "--name", "a", "--heartbeat-ms", "100",
                // A lease far longer than the test: only the predecessor's end can free the shards.
                "--timeout-ms", "600000",
            ],
            log: "\(logs)/a-restarted.log"
        )
        // The predecessor's session ends (its backend exits a moment after it is told to) and the new
        // one holds every shard.
        let tookOver = try await Self.poll(3_000) {
            let sessions = try await Self.query(database, named).split(separator: "\n")
            guard !sessions.isEmpty, !sessions.contains(Substring(predecessor)) else { return false }
            return try await locks() == 64
        }
        #expect(tookOver, "the restarted node never ended its predecessor's session and took the shards")
        let holders = try await Self.query(database, "SELECT count(*) FROM (\(named)) s")
        #expect(holders == "1")
        old.signal(SIGCONT)
        let oldStatus = await old.wait()
        if let oldStatus { #expect(oldStatus != 0, "the predecessor ended well: \(old.output)") }
        #expect(old.output.contains("superseded"), "\(old.output)")
        #expect(try await locks() == 64, "the predecessor took shards back")
        restarted.signal(SIGTERM)
        let status = await restarted.wait()
        #expect(restarted.endedWell(status), "the restarted node failed: \(restarted.output)")
    }

    /// Pauses one of two nodes while both have appends under way (cutting its session at the server
    /// first when `cutTheSession`), waits for the other to hold every shard, resumes it, and checks
    /// that its session ended and it joined again, that the owner's never did, and that every event
    /// committed once.
    func pause(seed: Int, cutTheSession: Bool) async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        await (try PostgresInbox(connecting: database)).close()
        let logs = try Self.logDirectory("pause-\(cutTheSession)-\(seed)")
        defer { try? FileManager.default.removeItem(atPath: logs) }
        let stale = try Self.node("stale", database: database, logs: logs)
        let owner = try Self.node("owner", database: database, logs: logs)
        let (entities, events) = Self.sanitized ? (50, 2_000) : (100, 6_000)
        let producer = try Child(
            [
                "cluster-send", "--postgres", database, "--producer", "0", "--events", "\(events)", "--entities",
                "\(entities)",
            ],
            log: "\(logs)/producer.log"
        )
        var generator = SplitMix(seed: UInt64(seed))
        let pauseAt = events / 10 + Int(generator.next() % UInt64(events / 3))
        func committed() async throws -> Int {
            Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0
        }
        func locks(of name: String) async throws -> Int { try await Self.shardLocks(of: name, in: database) }
        let reached = try await Self.poll(6_000) {
            // Both nodes hold shards, so the stale one has appends of its own under way.
            let (count, stale, owner) = (
                try await committed(), try await locks(of: "stale"), try await locks(of: "owner")
            )
            return count >= pauseAt && stale > 0 && owner > 0
        }
        #expect(reached, "the cluster never reached \(pauseAt) events with both nodes holding shards")
        stale.signal(SIGSTOP)
        let paused = ContinuousClock.now
        if cutTheSession {
            _ = try await Self.query(
                database,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'effectloop node stale'"
            )
        }
        let taken = try await Self.poll(3_000) { try await locks(of: "owner") == 64 }
        #expect(taken, "the owner never took the paused node's shards")
        // Printed, not asserted (the machine is shared): the lease is 1.5 s and the heartbeat 100 ms.
        print(
            "pause \(cutTheSession ? "with the session cut" : "alone"), seed \(seed): shards taken after \(ContinuousClock.now - paused)"
        )
        #expect(try await locks(of: "stale") == 0)
        // The stale node wakes up as the owner starts on the shards: its appends in flight would commit
        // between the owner's reading of a stream and its first append to it.
        stale.signal(SIGCONT)
        // Its session ends (fenced, or its lock session gone) and it joins again: it takes shards back.
        let rejoined = try await Self.poll(3_000) { try await locks(of: "stale") > 0 }
        #expect(rejoined, "the stale node never joined again: \(stale.output)")
        let produced = await producer.wait()
        #expect(producer.endedWell(produced), "the producer failed: \(producer.output)")
        _ = try await Self.poll(6_000, every: .milliseconds(20)) { try await committed() >= events }
        owner.signal(SIGTERM)
        stale.signal(SIGTERM)
        let ownerStatus = await owner.wait()
        #expect(owner.endedWell(ownerStatus), "the rightful owner stopped: \(owner.output)")
        // The owner's session never ended; the stale node's did, once, and it said so.
        #expect(!owner.output.contains("going on"), "\(owner.output)")
        let staleStatus = await stale.wait()
        #expect(stale.endedWell(staleStatus), "the stale node failed: \(stale.output)")
        try await Self.expectEveryRowOnce(database, events: events)
    }
}

/// A small seeded generator, so a seed names one run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A network namespace joined to this one by a pair of virtual Ethernet links, `10.213.X.1` on this
/// side and `.2` on the other, so a process run inside it reaches a server here over TCP, and the link
/// can be cut (set down: packets dropped, not refused) and restored. Removed when released.
final class NetworkPartition: Sendable {
    let namespace: String
    let here: String
    let there: String
    private let link: String

    /// Sets the namespace up, or returns `nil` where the machine does not allow it (not root, no `ip`).
    init?() {
        let id = Int(getpid()) % 200
        namespace = "effectloop-\(getpid())"
        link = "elr\(getpid())"
        here = "10.213.\(id).1"
        there = "10.213.\(id).2"
        let peer = "eln\(getpid())"
        guard Self.ip(["netns", "add", namespace]) else { return nil }
        let steps = [
            ["link", "add", link, "type", "veth", "peer", "name", peer],
            ["link", "set", peer, "netns", namespace],
            ["addr", "add", "\(here)/30", "dev", link],
            ["link", "set", link, "up"],
            ["-n", namespace, "addr", "add", "\(there)/30", "dev", peer],
            ["-n", namespace, "link", "set", peer, "up"],
            ["-n", namespace, "link", "set", "lo", "up"],
        ]
        for step in steps where !Self.ip(step) {
            remove()
            return nil
        }
    }

    /// The command prefix that runs a program inside the namespace.
    var wrapper: [String] { ["/usr/sbin/ip", "netns", "exec", namespace] }

    /// Cuts the link (packets dropped from now on) or restores it.
    func cut(_ cut: Bool) {
        _ = Self.ip(["link", "set", link, cut ? "down" : "up"])
    }

    private func remove() {
        _ = Self.ip(["link", "del", link])
        _ = Self.ip(["netns", "del", namespace])
    }

    deinit {
        remove()
    }

    /// Runs `ip` with `arguments`; whether it succeeded. Spawned directly: Foundation's `Process` leaves
    /// a weak reference's side table behind, which LeakSanitizer reports now and then.
    @discardableResult
    static func ip(_ arguments: [String]) -> Bool {
        guard geteuid() == 0, access("/usr/sbin/ip", X_OK) == 0 else { return false }
        var failure: Int32 = 0
        guard
            let pid = ChildProcess.spawn(
                "/usr/sbin/ip",
                ["/usr/sbin/ip"] + arguments,
                output: .discarded,
                failure: &failure
            )
        else { return false }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status == 0
    }
}

extension ClusterEndToEndTests {
    /// A node whose TCP connections to the database are cut (its link set down: packets dropped, not
    /// refused, so nothing tells it) while its appends are under way: it cannot renew its lease, so the
    /// other node ends its sessions and takes its shards within the lease timeout, and its appends go
    /// nowhere. Restored, it finds its session gone and joins again; every event is committed once and
    /// the other node's session never ends. Skipped where network namespaces are not allowed.
    @Test(.timeLimit(.minutes(10)))
    func aNodeCutOffByAPartitionLosesItsShardsWithinTheLease() async throws {
        guard let partition = NetworkPartition() else {
            print("skipped: network namespaces are not available here (needs root and `ip`)")
            return
        }
        let server = try await TemporaryPostgres(durable: false, listening: partition.here)
        defer { server.stop() }
        let database = try await server.createDatabase()
        let name = database.split(separator: " ").first { $0.hasPrefix("dbname=") } ?? ""
        let remote = "host=\(partition.here) port=5432 user=effectloop \(name)"
        await (try PostgresInbox(connecting: database)).close()
        let logs = try Self.logDirectory("partition")
        defer { try? FileManager.default.removeItem(atPath: logs) }
        let cut = try Child(
            ["cluster-node", "--postgres", remote, "--name", "cut", "--heartbeat-ms", "100", "--timeout-ms", "1500"],
            log: "\(logs)/cut.log",
            wrapper: partition.wrapper
        )
        let owner = try Self.node("owner", database: database, logs: logs)
        let (entities, events) = Self.sanitized ? (50, 2_000) : (100, 6_000)
        let producer = try Child(
            [
                "cluster-send", "--postgres", database, "--producer", "0", "--events", "\(events)", "--entities",
                "\(entities)",
            ],
            log: "\(logs)/producer.log"
        )
        func committed() async throws -> Int {
            Int(try await Self.query(database, "SELECT count(*) FROM effectloop.events")) ?? 0
        }
        func locks(of name: String) async throws -> Int { try await Self.shardLocks(of: name, in: database) }
        let reached = try await Self.poll(6_000) {
            let (count, mine, others) = (
                try await committed(), try await locks(of: "cut"), try await locks(of: "owner")
            )
            return count >= events / 5 && mine > 0 && others > 0
        }
        #expect(reached, "the cluster never had both nodes working: \(cut.output)")
        partition.cut(true)
        let cutAt = ContinuousClock.now
        let taken = try await Self.poll(3_000) { try await locks(of: "owner") == 64 }
        let after = ContinuousClock.now - cutAt
        #expect(taken, "the owner never took the cut-off node's shards")
        // The lease is 1.5 s and the heartbeat 100 ms: about 1.8 s; a generous bound on this shared machine.
        #expect(after < .seconds(10), "the shards were taken only after \(after)")
        print("partition: shards taken after \(after)")
        #expect(try await locks(of: "cut") == 0)
        let produced = await producer.wait()
        #expect(producer.endedWell(produced), "the producer failed: \(producer.output)")
        _ = try await Self.poll(6_000, every: .milliseconds(20)) { try await committed() >= events }
        #expect(try await committed() == events)
        // Restored: the cut-off node finds its sessions ended and joins again.
        partition.cut(false)
        let rejoined = try await Self.poll(6_000, every: .milliseconds(20)) { try await locks(of: "cut") > 0 }
        #expect(rejoined, "the cut-off node never joined again: \(cut.output)")
        owner.signal(SIGTERM)
        cut.signal(SIGTERM)
        let ownerStatus = await owner.wait()
        #expect(owner.endedWell(ownerStatus), "the owner stopped: \(owner.output)")
        #expect(!owner.output.contains("going on"), "\(owner.output)")
        _ = await cut.wait()
        try await Self.expectEveryRowOnce(database, events: events)
    }
}
