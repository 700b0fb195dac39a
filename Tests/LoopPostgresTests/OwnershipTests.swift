import LoopCore
import LoopPostgres
import Testing

/// The ownership program, tested as values: what a node decides from what the database says.
struct OwnershipTests {
    let start = ContinuousClock.now
    let grace = Duration.milliseconds(200)

    func view(_ node: String = "a") -> Ownership {
        Ownership(node: node, shards: 64, grace: grace)
    }

    /// Feeds `event`; the effects.
    func feed(_ view: inout Ownership, _ event: Ownership.Event) -> [Ownership.Effect] {
        Ownership.update(&view, event)
    }

    @Test func aNodeAloneTriesEveryShardAndOwnsThoseItLocks() {
        var a = view()
        #expect(feed(&a, .heartbeat(at: start, quiet: [])) == [])
        #expect(feed(&a, .membership(members: [], expired: [], at: start)) == [.tryLock(Array(0..<64))])
        #expect(feed(&a, .locked(shard: 3)) == [.recover(shard: 3)])
        #expect(feed(&a, .refused(shard: 4)) == [])
        #expect(a.owned == [3])
        // The next heartbeat tries again what it could not lock.
        let next = feed(&a, .membership(members: ["a"], expired: [], at: start + .milliseconds(100)))
        #expect(next == [.tryLock(Array(0..<64).filter { $0 != 3 })])
    }

    @Test func aJoinHandsOverTheJoinersShardsOnceTheyAreQuiet() {
        var a = view()
        _ = feed(&a, .membership(members: ["a"], expired: [], at: start))
        for shard in 0..<64 { _ = feed(&a, .locked(shard: shard)) }
        // b joins: a should own only its share now.
        let theirs = ShardMap(shards: 64).shards(of: "b", among: ["a", "b"])
        #expect(!theirs.isEmpty)
        #expect(feed(&a, .membership(members: ["a", "b"], expired: [], at: start)) == [])
        #expect(a.owned == Set(0..<64).subtracting(theirs))
        #expect(a.releasing == theirs)
        // Released only when quiet, and only what is being handed over.
        let some = Set(theirs.prefix(1))
        #expect(feed(&a, .heartbeat(at: start, quiet: some.union([9_999]))) == [.unlock(some)])
        #expect(a.releasing == theirs.subtracting(some))
        // A shard being handed over is not tried again while it is.
        #expect(feed(&a, .membership(members: ["a"], expired: [], at: start)) == [.tryLock(some.sorted())])
    }

    @Test func aLeaveMakesTheOthersTryItsShards() {
        var b = view("b")
        _ = feed(&b, .membership(members: ["a", "b"], expired: [], at: start))
        let mine = b.desired
        for shard in mine { _ = feed(&b, .locked(shard: shard)) }
        // a is gone (killed: its session ended with it).
        #expect(
            feed(&b, .membership(members: ["b"], expired: [], at: start)) == [
                .tryLock(Set(0..<64).subtracting(mine).sorted())
            ]
        )
    }

    @Test func aMissedRenewalEndsTheNodesSessionOnlyAfterTheGrace() {
        var a = view()
        _ = feed(&a, .membership(members: ["a"], expired: ["b"], at: start))
        #expect(feed(&a, .heartbeat(at: start + .milliseconds(100), quiet: [])) == [])
        #expect(feed(&a, .heartbeat(at: start + grace, quiet: [])) == [.endSessions(of: ["b"])])
        // Seen expired again, it keeps the time it was first seen.
        _ = feed(&a, .membership(members: ["a"], expired: ["b"], at: start + grace))
        #expect(a.staleSince["b"] == start)
    }

    @Test func aRenewalThatLandsLateSparesTheNode() {
        // A stall every node shares: b's lease looks expired once, then its renewal lands.
        var a = view()
        _ = feed(&a, .membership(members: ["a"], expired: ["b"], at: start))
        _ = feed(&a, .membership(members: ["a", "b"], expired: [], at: start + .milliseconds(100)))
        #expect(feed(&a, .heartbeat(at: start + grace * 5, quiet: [])) == [])
        #expect(a.staleSince.isEmpty)
    }

    /// b should own a shard a still holds (a is handing it over when it crashes): b's lock is refused
    /// until a's session ends with the crash; then b takes it at its next heartbeat.
    @Test func aHandoffInterruptedByACrashEndsWithTheShardTaken() {
        var b = view("b")
        let theirs = b.map.shards(of: "b", among: ["a", "b"])
        let shard = theirs.sorted()[0]
        _ = feed(&b, .membership(members: ["a", "b"], expired: [], at: start))
        #expect(feed(&b, .refused(shard: shard)) == [])
        #expect(!b.owned.contains(shard))
        // a crashed mid-handoff: its session, and the lock, are gone; it is no longer a member.
        let retry = feed(&b, .membership(members: ["b"], expired: [], at: start + .milliseconds(100)))
        guard case .tryLock(let shards)? = retry.first else {
            Issue.record("tried nothing: \(retry)")
            return
        }
        #expect(shards.contains(shard))
        #expect(feed(&b, .locked(shard: shard)) == [.recover(shard: shard)])
        #expect(b.owned.contains(shard))
    }

    /// A node paused past its lease: the others end its session (so its locks are gone at the
    /// database) and take its shards; its own view, still claiming them, is discarded with its session
    /// (the node joins again with a new view, which claims nothing until it locks).
    @Test func aNewSessionClaimsNothingUntilItLocks() {
        var fresh = view()
        _ = feed(&fresh, .membership(members: ["a", "b"], expired: [], at: start))
        #expect(fresh.owned.isEmpty && fresh.releasing.isEmpty)
        #expect(!fresh.desired.isEmpty)
    }

    @Test func aNodeNeverEndsItsOwnSession() {
        var a = view()
        _ = feed(&a, .membership(members: [], expired: ["a"], at: start))
        #expect(feed(&a, .heartbeat(at: start + grace * 5, quiet: [])) == [])
    }
}
