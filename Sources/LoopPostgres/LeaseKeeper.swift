internal import Dispatch
internal import LoopRuntime

/// Renews a cluster node's lease every heartbeat, on a connection and a thread of its own.
///
/// A node's lease is its row in `nodes`: the others end the lock session of a node whose heartbeat is
/// older than the membership timeout (see ``ClusterNode``). The node's loop renews it too, but that loop
/// runs on Swift's cooperative threads and does SQL and recovery between heartbeats: a node busy
/// recovering thousands of entities (a shard taken over, a restart) can go longer than the timeout
/// between two turns of its loop while it is alive and working, and would lose its shards for it. The
/// keeper's renewal needs neither, so what ends a lease is what should: the process stopped (paused,
/// killed), cut off from the database, or its loop stuck for longer than `stallLimit`.
///
/// `@unchecked Sendable` is safe: the only mutable state is `state`, behind its lock.
final class LeaseKeeper: @unchecked Sendable {
    private let worker: PostgresWorker
    private let schema: String
    private let node: String
    private let heartbeat: Duration
    private let stallLimit: Duration
    private let state: Locked<State>

    private struct State {
        /// The lock session whose lease is renewed: the backend pid the node's heartbeat recorded.
        var session: Int32?
        /// When the node's loop last began a turn.
        var lastTurn = ContinuousClock.now
        var stopped = false
    }

    init(conninfo: String, schema: String, node: String, heartbeat: Duration, stallLimit: Duration) {
        worker = PostgresWorker(
            conninfo,
            label: "effectloop.lease.\(node)",
            applicationName: "effectloop lease \(node)"
        )
        self.schema = schema
        self.node = node
        self.heartbeat = heartbeat
        self.stallLimit = stallLimit
        state = Locked(State())
    }

    /// Starts renewing the lease of the lock session `session` (the node's first heartbeat recorded
    /// it); once: later calls change nothing.
    func start(session: Int32) {
        let first = state.withLock { state in
            defer { state.session = session }
            return state.session == nil && !state.stopped
        }
        if first { worker.schedule(after: heartbeat) { [self] in renew() } }
    }

    /// The node's loop began a turn: it is not stuck.
    func turned() {
        state.withLock { $0.lastTurn = .now }
    }

    /// Stops renewing, after any renewal under way.
    func stop() async {
        state.withLock { $0.stopped = true }
        await worker.close()
    }

    /// One renewal, then the next one scheduled. A renewal that fails (the connection broke, say) is
    /// tried again at the next heartbeat: the lease lapses only if none succeeds within the timeout.
    private func renew() {
        let (session, lastTurn, stopped) = state.withLock { ($0.session, $0.lastTurn, $0.stopped) }
        guard !stopped, let session else { return }
        if ContinuousClock.now - lastTurn < stallLimit {
            let (schema, node) = (self.schema, self.node)
            _ = worker.runInline { connection throws(PostgresError) in
                try connection.execute(
                    "UPDATE \(schema).nodes SET heartbeat_at = now() WHERE node = $1 AND session_pid = $2",
                    [.text(node), .int(Int64(session))]
                )
            }
        }
        worker.schedule(after: heartbeat) { [self] in renew() }
    }
}
