package import LoopCore

/// What a cluster node knows and decides about shard ownership, as a pure program: its state is the
/// node's view (the shards it holds, those it is handing over, the other nodes seen with an expired
/// lease and since when), its events are what the database said, and its effects are the lock and
/// session operations the node's heartbeat then carries out. ``ClusterSession`` drives it, one heartbeat at
/// a time; every decision is here, tested as values (`OwnershipTests`).
///
/// | event | the view changes | effects |
/// |---|---|---|
/// | `heartbeat(at:quiet:)` | handed-over shards whose entities are released leave `releasing` | end the lock sessions of nodes expired for the grace; unlock the quiet shards |
/// | `membership(members:expired:at:)` | the shards it should own (`desired`); shards it owns but should not move to `releasing`; expired nodes remembered from when first seen | try to lock the desired shards it neither holds nor is handing over |
/// | `locked(shard:)` | the shard is owned | recover the shard's entities with work under way |
/// | `refused(shard:)` | nothing (tried again next heartbeat) | - |
package struct Ownership: Hashable, Sendable {
    /// This node's name.
    package let node: String
    package let map: ShardMap
    /// How long another node's lease must have been seen expired before its session is ended: two
    /// heartbeats, so a stall every node shares (the database's) does not make them end one another.
    package let grace: Duration
    /// The shards whose lock this node holds and whose inbox it processes.
    package var owned: Set<Int> = []
    /// The shards this node holds but should not: handed over once their entities are quiet.
    package var releasing: Set<Int> = []
    /// The shards the membership says this node should own.
    package var desired: Set<Int> = []
    /// Other nodes seen with an expired lease while their session lived on, since when.
    package var staleSince: [String: ContinuousClock.Instant] = [:]

    /// What the database said, or what the node did.
    package enum Event: Hashable, Sendable {
        /// A heartbeat begins at `at`; `quiet`: the shards being handed over whose entities are all
        /// released (their events committed).
        case heartbeat(at: ContinuousClock.Instant, quiet: Set<Int>)
        /// The membership after this node renewed its lease: the live nodes, and the other nodes whose
        /// lease expired while their session lives on.
        case membership(members: [String], expired: [String], at: ContinuousClock.Instant)
        /// The shard's lock was taken, and the previous owner's appends under way have ended.
        case locked(shard: Int)
        /// The shard's lock is held by another session, or its fence could not be awaited.
        case refused(shard: Int)
    }

    /// A lock or session operation for the heartbeat to carry out.
    package enum Effect: Hashable, Sendable {
        /// End the lock sessions of these nodes (their lease expired): frees their shards, fences them.
        case endSessions(of: [String])
        /// Release these shards' locks: handed over.
        case unlock(Set<Int>)
        /// Try to take these shards' locks, in this order.
        case tryLock([Int])
        /// Recover the shard's entities that may have work under way.
        case recover(shard: Int)
    }

    package init(node: String, shards: Int, grace: Duration) {
        self.node = node
        self.map = ShardMap(shards: shards)
        self.grace = grace
    }

    /// The program: the view's next state and the effects of `event`.
    package static let update = Update<Ownership, Event, Effect> { view, event in
        switch event {
        case .heartbeat(let now, let quiet):
            var effects: [Effect] = []
            let doomed = view.staleSince.filter { now - $0.value >= view.grace }.map(\.key).sorted()
            if !doomed.isEmpty { effects.append(.endSessions(of: doomed)) }
            let released = quiet.intersection(view.releasing)
            if !released.isEmpty {
                view.releasing.subtract(released)
                effects.append(.unlock(released))
            }
            return effects
        case .membership(let members, let expired, let now):
            let everyone = members.contains(view.node) ? members : members + [view.node]
            view.desired = view.map.shards(of: view.node, among: everyone)
            // Shards another node should own now: handed over once their entities are quiet.
            let handing = view.owned.subtracting(view.desired)
            view.owned.subtract(handing)
            view.releasing.formUnion(handing)
            var staleSince: [String: ContinuousClock.Instant] = [:]
            for other in expired where other != view.node { staleSince[other] = view.staleSince[other] ?? now }
            view.staleSince = staleSince
            let wanted = view.desired.subtracting(view.owned).subtracting(view.releasing).sorted()
            return wanted.isEmpty ? [] : [.tryLock(wanted)]
        case .locked(let shard):
            view.owned.insert(shard)
            return [.recover(shard: shard)]
        case .refused:
            return []
        }
    }
}
