import LoopPostgres
import Testing

@Suite("ShardMap")
struct ShardMapTests {
    let map = ShardMap(shards: 64)

    @Test func everyNodeComputesTheSameOwnersWhateverTheOrderItListsThemIn() {
        let owners = map.owners(among: ["a", "b", "c"])
        #expect(owners.count == 64)
        #expect(map.owners(among: ["c", "a", "b"]) == owners)
        #expect(Set(owners) == ["a", "b", "c"])
    }

    @Test func shardsSpreadRoughlyEvenly() {
        let nodes = (1...4).map { "node-\($0)" }
        let counts = nodes.map { map.shards(of: $0, among: nodes).count }
        #expect(counts.reduce(0, +) == 64)
        // 16 each on average; rendezvous hashing keeps each within a few of it.
        #expect(counts.allSatisfy { (8...24).contains($0) }, "\(counts)")
    }

    @Test func aNodeThatLeavesMovesOnlyItsOwnShards() {
        let before = map.owners(among: ["a", "b", "c"])
        let after = map.owners(among: ["a", "c"])
        for shard in 0..<64 where before[shard] != "b" {
            #expect(after[shard] == before[shard], "shard \(shard) moved from \(before[shard])")
        }
        #expect(!after.contains("b"))
    }

    @Test func aNodeThatJoinsTakesShardsOnlyForItself() {
        let before = map.owners(among: ["a", "b"])
        let after = map.owners(among: ["a", "b", "c"])
        for shard in 0..<64 where after[shard] != before[shard] {
            #expect(after[shard] == "c", "shard \(shard) moved to \(after[shard]), not to the new node")
        }
        #expect(after.filter { $0 == "c" }.count > 0)
    }

    @Test func noNodesOwnNothingAndAStrangerOwnsNothing() {
        #expect(map.owners(among: []).isEmpty)
        #expect(map.shards(of: "z", among: ["a", "b"]).isEmpty)
        #expect(ShardMap(shards: 0).shards == 1)
    }
}
