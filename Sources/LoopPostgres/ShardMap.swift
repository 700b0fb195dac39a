/// Which node owns which shard: a pure function of the shard count and the live nodes, so every node
/// computes the same answer from the same membership, with no coordinator.
///
/// Rendezvous (highest random weight) hashing: each shard goes to the live node whose hash with the
/// shard is highest. When a node joins, it takes about `shards / nodes` shards, each from whichever node
/// had it; when a node leaves, only its shards move, spread over the others. Nothing else moves.
///
/// ```swift
/// let owners = ShardMap(shards: 64).owners(among: ["node-a", "node-b", "node-c"])
/// owners[17]   // "node-b", on every node
/// ```
public struct ShardMap: Hashable, Sendable {
    /// How many shards the entities are spread over; fixed for the life of a cluster.
    public let shards: Int

    /// A map of `shards` shards (at least 1).
    public init(shards: Int) {
        self.shards = max(1, shards)
    }

    /// The owner of each shard (by index) among `nodes`; empty when there are no nodes.
    public func owners(among nodes: [String]) -> [String] {
        guard !nodes.isEmpty else { return [] }
        let sorted = nodes.sorted()
        return (0..<shards).map { shard in
            var best = sorted[0]
            var bestWeight = Self.weight(best, shard)
            for node in sorted.dropFirst() {
                let weight = Self.weight(node, shard)
                if weight > bestWeight {
                    (best, bestWeight) = (node, weight)
                }
            }
            return best
        }
    }

    /// The shards `node` owns among `nodes` (none if it is not one of them).
    public func shards(of node: String, among nodes: [String]) -> Set<Int> {
        Set(owners(among: nodes).enumerated().filter { $0.element == node }.map(\.offset))
    }

    /// A stable 64-bit weight of `node` for `shard`: FNV-1a over the node's bytes and the shard's, then
    /// mixed (splitmix64's finaliser), the same on every machine and in every run.
    static func weight(_ node: String, _ shard: Int) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in node.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        var number = UInt64(truncatingIfNeeded: shard)
        for _ in 0..<8 {
            hash = (hash ^ (number & 0xff)) &* 0x0000_0100_0000_01b3
            number >>= 8
        }
        hash = (hash ^ (hash >> 30)) &* 0xbf58_476d_1ce4_e5b9
        hash = (hash ^ (hash >> 27)) &* 0x94d0_49bb_1331_11eb
        return hash ^ (hash >> 31)
    }
}
