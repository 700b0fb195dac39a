import Dispatch
import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopTesting

#if canImport(Glibc)
import Glibc
#endif

// The cluster's processes, for w11 and for the end-to-end test: `loop-bench cluster-node` runs one node
// of counters; `loop-bench cluster-send` is a producer.

/// The entities of the cluster runs: each adds up what it is sent.
enum ClusterTally {
    enum Event: Codable, Sendable, Equatable {
        case add(Int)
    }

    static let program = DurableProgram<Int, Event, Never>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount): total += amount
            }
            return []
        }
    )

    /// Event `index` of producer `producer`: its entity and its amount, the same in every process.
    static func event(_ index: Int, producer: Int, entities: Int) -> (entity: Int, amount: Int) {
        ((index &* 7_919 &+ producer &* 104_729) % entities, index % 10 + 1)
    }
}

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
    do {
        let node = try await ClusterNode(
            connecting: conninfo,
            name: name,
            program: ClusterTally.program,
            effects: EffectRouter(),
            events: JSONCodec<ClusterTally.Event>(),
            states: JSONCodec<Int>(),
            configuration: .init(heartbeat: .milliseconds(heartbeat), membershipTimeout: .milliseconds(timeout))
        )
        signal(SIGTERM, SIG_IGN)
        let terminate = DispatchSource.makeSignalSource(signal: SIGTERM)
        terminate.setEventHandler { node.stop() }
        terminate.resume()
        defer { terminate.cancel() }
        try await node.run()
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
