import EffectHandlers
import EventSources
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport

#if canImport(Glibc)
import Glibc
#endif

// The cluster's processes, for w11 and for the end-to-end test: `loop-bench cluster-node` runs one node
// of counters; `loop-bench cluster-send` is a producer.

/// The value after `--name` in `words`.
func option(_ name: String, in words: [String]) -> String? {
    words.firstIndex(of: name).flatMap { words.indices.contains($0 + 1) ? words[$0 + 1] : nil }
}

/// `cluster-node --postgres CONNINFO --name NAME [--heartbeat-ms N] [--timeout-ms N]`: one node until
/// SIGTERM (then it leaves gracefully; exit 0) or a failure that stops it (exit 1).
func runClusterNode(_ words: [String]) async -> Int32 {
    guard let conninfo = option("--postgres", in: words), let name = option("--name", in: words) else {
        Measure.printError("usage: loop-bench cluster-node --postgres CONNINFO --name NAME\n")
        return 64
    }
    let heartbeat = Int(option("--heartbeat-ms", in: words) ?? "") ?? 250
    let timeout = Int(option("--timeout-ms", in: words) ?? "") ?? 3_000
    let schema = option("--schema", in: words) ?? "effectloop"
    // SIGTERM is caught from the start: one that comes while the node connects (a test stopping a node
    // it has just restarted) ends the process cleanly instead of killing it.
    let stopping = Locked<(requested: Bool, node: (any Runnable)?)>((false, nil))
    let terminate = SignalWatcher([.terminate]) { _ in
        stopping.withLock { stopping in
            stopping.requested = true
            return stopping.node
        }?.stop(gracePeriod: .seconds(30))
    }
    // Cancelled, the watcher releases its handler and the cell, so the node is gone before the process
    // exits (a node alive at exit is a leak to LeakSanitizer: its weak-reference table).
    defer { terminate.cancel() }
    do {
        // `--program totals`: entities that answer requests (w14); otherwise counters.
        let node: any ClusterRunnable =
            option("--program", in: words) == "totals"
            ? try await ClusterNode(
                connecting: conninfo,
                name: name,
                program: ClusterTotals.program,
                effects: EffectRouter(),
                events: JSONCodec<ClusterTotals.Event>(),
                states: JSONCodec<Int>(),
                configuration: .init(
                    schema: schema,
                    heartbeat: .milliseconds(heartbeat),
                    membershipTimeout: .milliseconds(timeout)
                )
            )
            : try await ClusterNode(
                connecting: conninfo,
                name: name,
                program: ClusterTally.program,
                effects: EffectRouter(),
                events: JSONCodec<ClusterTally.Event>(),
                states: JSONCodec<Int>(),
                configuration: .init(
                    schema: schema,
                    heartbeat: .milliseconds(heartbeat),
                    membershipTimeout: .milliseconds(timeout)
                )
            )
        let requested = stopping.withLock { stopping in
            stopping.node = node
            return stopping.requested
        }
        // Asked to stop before it ran: it owns nothing yet, so there is nothing to hand over.
        if requested { return 0 }
        // What the node rode out (a lost session, joined again) goes to its log.
        _ = try await node.run(onFailure: { Measure.printError("cluster-node \(name): \($0); going on\n") })
        return 0
    } catch {
        Measure.printError("cluster-node \(name): \(error)\n")
        return 1
    }
}

/// `cluster-send --postgres CONNINFO --producer P --events N --entities E`: producer P's N events, 500
/// per transaction; exit 0 once all are committed.
func runClusterSend(_ words: [String]) async -> Int32 {
    guard let conninfo = option("--postgres", in: words), let producer = Int(option("--producer", in: words) ?? ""),
        let events = Int(option("--events", in: words) ?? ""),
        let entities = Int(option("--entities", in: words) ?? ""),
        entities > 0
    else {
        Measure.printError("usage: loop-bench cluster-send --postgres CONNINFO --producer P --events N --entities E\n")
        return 64
    }
    do {
        let inbox = try await PostgresInbox(connecting: conninfo)
        let codec = JSONCodec<ClusterTally.Event>()
        var index = 0
        while index < events {
            let end = min(events, index + 500)
            var rows: [(stream: String, payload: [UInt8])] = []
            for number in index..<end {
                let (entity, amount) = ClusterTally.event(number, producer: producer, entities: entities)
                rows.append((stream: "entity-\(entity)", payload: try codec.encode(.add(amount))))
            }
            try await inbox.send(rows)
            index = end
        }
        await inbox.close()
        return 0
    } catch {
        Measure.printError("cluster-send \(producer): \(error)\n")
        return 1
    }
}

/// A cluster node of either program, as `cluster-node` runs it.
protocol ClusterRunnable: Runnable {
    func run(onFailure: @escaping @Sendable (ClusterError) -> Void) async throws -> LoopReport
}

extension ClusterNode: ClusterRunnable {}

/// A child process of the benchmark: this executable in one of its cluster modes, output discarded.
final class ClusterProcess {
    let pid: pid_t
    private var reaped = false

    init(_ arguments: [String]) throws {
        var path = [CChar](repeating: 0, count: 4_096)
        let length = readlink("/proc/self/exe", &path, path.count - 1)
        let executable =
            length > 0
            ? String(decoding: path.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) : "loop-bench"
        var failure: Int32 = 0
        guard
            let pid = ChildProcess.spawn(
                executable,
                [executable] + arguments,
                output: .discarded,
                options: ChildProcess.Options(endsWithThisProcess: true),
                failure: &failure
            )
        else {
            throw CodecError("cannot start \(executable) (errno \(failure))")
        }
        self.pid = pid
    }

    /// Kills the process with `signal` and reaps it.
    func stop(_ signal: Int32) {
        guard !reaped else { return }
        ChildProcess.stop(pid, with: signal)
        reaped = true
    }

    deinit { stop(SIGKILL) }
}

extension Workloads {
    /// w11: failover. Two nodes own the shards; a node is killed with SIGKILL and an event is sent at
    /// once to an entity of one of its shards; the time until that event is committed by the other node
    /// is the failover time. The killed node restarts (and takes its shards back) before the next round.
    static func w11(_ sizes: Sizes) async throws -> Outcome {
        let (server, base) = try await benchServer()
        defer { server?.stop() }
        let schema = "bench_w11_\(getpid())"
        let inbox = try await PostgresInbox(connecting: base, schema: schema)
        let control = try PostgresConnection(base)
        defer {
            _ = try? control.execute("DROP SCHEMA \(schema) CASCADE")
            control.close()
        }
        func node(_ name: String) throws -> ClusterProcess {
            try ClusterProcess(["cluster-node", "--postgres", base, "--name", name, "--schema", schema])
        }
        /// The shards each node's lock connection holds.
        func held() throws -> [String: [Int64]] {
            let rows = try control.execute(
                """
                SELECT a.application_name, l.objid::bigint FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.classid::bigint = (hashtext($1)::bigint & 4294967295)
                """,
                [.text(schema)]
            )
            var held: [String: [Int64]] = [:]
            for row in rows.rows.indices { held[try rows.text(row, 0), default: []].append(try rows.int(row, 1)) }
            return held
        }
        func shardsBalanced(_ names: [String]) async throws -> Bool {
            for _ in 0..<3_000 {
                let now = try held()
                if now.values.map(\.count).reduce(0, +) == 64,
                    names.allSatisfy({ !(now["effectloop node \($0)"] ?? []).isEmpty })
                {
                    return true
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            return false
        }
        var nodes = ["n1": try node("n1"), "n2": try node("n2")]
        var ok = try await shardsBalanced(["n1", "n2"])
        var failovers: [Double] = []
        var withHistory: [Double] = []
        let codec = JSONCodec<ClusterTally.Event>()
        // The kills, then as many again once the store holds `w11History` finished entities (streams
        // whose entities have no work under way): a taker must not recover them.
        for round in 0..<(2 * sizes.w11Kills) where ok {
            if round == sizes.w11Kills {
                let payload = try InboxedCodec(codec).encode(Inboxed(inboxRow: nil, event: .add(1)))
                try control.execute(
                    "INSERT INTO \(schema).events (stream, version, payload) SELECT 'done-' || n, 1, $1 FROM generate_series(1, $2) n",
                    [.bytes(payload), .int(Int64(sizes.w11History))]
                )
            }
            let victim = round % 2 == 0 ? "n1" : "n2"
            guard let shard = try held()["effectloop node \(victim)"]?.first else {
                ok = false
                break
            }
            let rows = try control.execute(
                "SELECT 'w11-\(round)-' || n FROM generate_series(1, 100000) n WHERE \(schema).shard_of('w11-\(round)-' || n, 64) = $1 LIMIT 1",
                [.int(shard)]
            )
            let entity = try rows.text(0, 0)
            nodes[victim]?.stop(SIGKILL)
            let killed = ContinuousClock.now
            try await inbox.send(try codec.encode(.add(1)), to: entity)
            var processed = false
            while ContinuousClock.now - killed < .seconds(30) {
                let count = try control.execute(
                    "SELECT count(*)::bigint FROM \(schema).events WHERE stream = $1",
                    [.text(entity)]
                )
                if try count.int(0, 0) > 0 {
                    processed = true
                    break
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            let elapsed = ContinuousClock.now - killed
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            if round < sizes.w11Kills { failovers.append(seconds) } else { withHistory.append(seconds) }
            ok = ok && processed
            nodes[victim] = try node(victim)
            let back = try await shardsBalanced(["n1", "n2"])
            ok = ok && back
        }
        for process in nodes.values { process.stop(SIGTERM) }
        await inbox.close()
        return Outcome(
            workload: "w11",
            title:
                "failover: SIGKILL of a node to the first event of one of its entities committed by another (\(failovers.count) kills; as many with \(sizes.w11History) finished entities in the store)",
            perSecond: 0,
            rawPerSecond: 0,
            runs: failovers.count,
            // The bars: 1.5 s p50 and 2 s max, and 2 s with the finished entities.
            ok: ok && Measure.median(failovers) <= 1.5 && (failovers.max() ?? 0) <= 2 && (withHistory.max() ?? 0) <= 2,
            extra: [
                ("failover_p50_s", Measure.median(failovers)), ("failover_max_s", failovers.max() ?? 0),
                ("with_history_p50_s", Measure.median(withHistory)), ("with_history_max_s", withHistory.max() ?? 0),
            ]
        )
    }
}

extension Workloads {
    /// w14: requests across the cluster. One node (`cluster-node --program totals`, a process of its
    /// own) owns every shard; this process is the caller: 64 requesters send keyed requests to 1,000
    /// entities through a `ClusterClient`, each answered once its event is committed (the answer written
    /// in the same transaction, the caller woken by its notification). Each entity is recovered once in
    /// a run (a read of its stream), then stays live. Replies/s with p50/p99 latency.
    static func w14(_ sizes: Sizes) async throws -> Outcome {
        let (entities, requesters, each) = (1_000, 64, sizes.w14Requests)
        let total = requesters * each
        let (server, base) = try await benchServer()
        defer { server?.stop() }
        var rates: [Double] = []
        var p50s: [Double] = []
        var p99s: [Double] = []
        var ok = true
        for run in 0..<sizes.runs {
            let schema = "bench_w14_\(getpid())_\(run)"
            let client = try await ClusterClient(
                connecting: base,
                events: JSONCodec<ClusterTotals.Event>(),
                schema: schema
            )
            let node = try ClusterProcess([
                "cluster-node", "--postgres", base, "--name", "w14", "--schema", schema, "--program", "totals",
            ])
            // The node owns every shard once the first request is answered: not timed.
            _ = try await client.request(to: "warm-up", key: "warm-up", timeout: .seconds(60)) { .add(0, replyTo: $0) }
            var latencies: [Double] = []
            var answered = 0
            let seconds = try await Measure.seconds {
                try await withThrowingTaskGroup(of: ([Double], Int).self) { tasks in
                    for requester in 0..<requesters {
                        tasks.addTask {
                            var mine: [Double] = []
                            mine.reserveCapacity(each)
                            var count = 0
                            for index in 0..<each {
                                let entity = (requester * each + index) % entities
                                let start = ContinuousClock.now
                                let total = try await client.request(
                                    to: "entity-\(entity)",
                                    key: "r\(requester)-\(index)",
                                    timeout: .seconds(60)
                                ) { .add(1, replyTo: $0) }
                                mine.append(Deposits.milliseconds(ContinuousClock.now - start))
                                if total > 0 { count += 1 }
                            }
                            return (mine, count)
                        }
                    }
                    for try await (mine, count) in tasks {
                        latencies += mine
                        answered += count
                    }
                }
            }
            node.stop(SIGTERM)
            await client.close()
            let connection = try PostgresConnection(base)
            let events = try connection.execute("SELECT count(*) FROM \(schema).events").int(0, 0)
            _ = try? connection.execute("DROP SCHEMA \(schema) CASCADE")
            connection.close()
            ok = ok && answered == total && events == Int64(total + 1)
            latencies.sort()
            rates.append(Double(total) / seconds)
            p50s.append(Deposits.percentile(latencies, 0.5))
            p99s.append(Deposits.percentile(latencies, 0.99))
        }
        return Outcome(
            workload: "w14",
            title: "keyed requests across the cluster from another process, \(requesters) requesters, one node",
            perSecond: Measure.median(rates),
            rawPerSecond: 0,
            runs: sizes.runs,
            ok: ok,
            extra: [
                ("p50_ms", Measure.median(p50s)), ("p99_ms", Measure.median(p99s)), ("p99_ms_max", p99s.max() ?? 0),
            ],
            rates: rates
        )
    }
}
