import LoopRuntime
import Testing

@testable import LoopPersistence

/// The marks of a group's entities with work under way, in their stream: snapshots, a second writer,
/// a store that fails.
@Suite struct WorkLedgerTests {
    /// A snapshot every `snapshotEvery` records (1,000 by default; 10 here), counted across restarts:
    /// reading the marks back reads the snapshot and the records after it.
    @Test func theMarksAreReadBackFromASnapshotAndTheRecordsAfterIt() async throws {
        let store = CountingStore()
        let first = WorkLedger(store: store, stream: "work", snapshotEvery: 10)
        #expect(try await first.load().isEmpty)
        for index in 0..<6 { #expect(await first.mark("s\(index)")) }
        // A restart: its records count toward the same snapshot. One record each: 12 in all.
        let second = WorkLedger(store: store, stream: "work", snapshotEvery: 10)
        #expect(try await second.load().count == 6)
        for index in 0..<6 {
            if index % 2 == 0 {
                second.change("s\(index)", unfinished: false)
                await second.flush()
            } else {
                #expect(await second.mark("t\(index)"))
            }
        }
        // The snapshot is saved aside: wait for it (at most 10 s).
        var saved: Snapshot?
        for _ in 0..<2_000 where saved == nil {
            saved = try await store.latestSnapshot(of: "work")
            if saved == nil { try await Task.sleep(for: .milliseconds(5)) }
        }
        let snapshot = try #require(saved)
        #expect(snapshot.version == 10)
        store.eventsRead.withLock { $0 = 0 }
        let third = WorkLedger(store: store, stream: "work", snapshotEvery: 10)
        let marked = try await third.load()
        #expect(marked == ["s1", "s3", "s5", "t1", "t3", "t5"])
        #expect(store.eventsRead.withLock { $0 } == 2)
    }

    /// Two writers of one stream (a process still stopping while the next starts): each reads what the
    /// other wrote before it writes again, so every mark is kept, snapshots included.
    @Test func aSecondWriterLosesNoMark() async throws {
        let store = InMemoryEventStore()
        let a = WorkLedger(store: store, stream: "work")
        let b = WorkLedger(store: store, stream: "work")
        _ = try await a.load()
        _ = try await b.load()
        #expect(await a.mark("a"))
        #expect(await b.mark("b"))
        #expect(await a.mark("c"))
        b.change("a", unfinished: false)
        await b.flush()
        #expect(try await WorkLedger(store: store, stream: "work").load() == ["b", "c"])
    }

    /// A mark the store refuses is reported to the append waiting for it, and the stream does not count
    /// as marked: the next batch that gives it work marks it again.
    @Test func aMarkTheStoreRefusesDoesNotCount() async throws {
        let store = CountingStore()
        let ledger = WorkLedger(store: store, stream: "work")
        _ = try await ledger.load()
        store.failAppends.withLock { $0 = true }
        #expect(await ledger.mark("a") == false)
        #expect(!ledger.isMarked("a"))
        store.failAppends.withLock { $0 = false }
        #expect(await ledger.mark("a"))
        #expect(ledger.isMarked("a"))
    }

    /// Damaged marks are an error naming the stream and the version, never a trap.
    @Test func damagedMarksAreAnError() async throws {
        for bytes: [UInt8] in [[], [1], [1, 5, 1], [1, 1, 7, 3, 0x61], [2, 0xFF], [9]] {
            let store = InMemoryEventStore()
            _ = try await store.append([bytes], to: "work", expecting: 0)
            await #expect(throws: DurableLoopError.self) { try await WorkLedger(store: store, stream: "work").load() }
        }
    }
}
