internal import LoopRuntime

/// Where a ``DurableLoopGroup`` remembers which of its entities have work under way, so that its
/// ``DurableLoopGroup/run()`` wakes exactly those after a restart, and no other.
///
/// An entity has work under way when its program's ``DurableProgram/resume`` returns an effect for its
/// state, or when a timer of it waits (``DurableProgram/keepingTimers(codec:)``). The group keeps a
/// mark per such entity in a stream of its own, in its store: the mark is written **before** the
/// record that gives the entity work (so no crash leaves work unmarked), and cleared after the record
/// that ends it. A restarted group reads the marks back (one snapshot and what follows it) and wakes
/// each marked entity, which recovers and resumes; 100,000 finished entities cost nothing.
///
/// ```swift
/// let accounts = DurableLoopGroup<String, Account, Account.Event, Account.Effect>(
///     stream: { "account-\($0)" },
///     program: Account.program,
///     effects: router,
///     store: store,
///     remembering: WorkMemory { stream in stream.hasPrefix("account-") ? String(stream.dropFirst(8)) : nil }
/// )
/// ```
public struct WorkMemory<ID: Sendable>: Sendable {
    /// The stream the marks are kept in, in the group's store: a name no entity's stream has, and one
    /// per group (two groups on one store would wake each other's entities).
    public var stream: String
    /// The entity whose stream is `stream`, or `nil` for a stream that is not one of the group's.
    public var id: @Sendable (String) -> ID?

    /// Marks kept in `stream`; `id` turns a marked stream back into its entity.
    public init(stream: String = "effectloop.work", id: @escaping @Sendable (String) -> ID?) {
        self.stream = stream
        self.id = id
    }
}

extension WorkMemory where ID == String {
    /// For a group whose streams are its ids (`stream: { $0 }`): every marked stream but the marks' own.
    public static func streams(in stream: String = "effectloop.work") -> WorkMemory {
        WorkMemory(stream: stream) { $0 == stream ? nil : $0 }
    }
}

/// The marks of a group's entities with work under way, in one stream of the store: each record a batch
/// of marks and clears, in the order they were asked for; a snapshot of the marked set every 1,000
/// records, so reading them back reads at most that many records.
@usableFromInline
final class WorkLedger: Sendable {
    let store: any EventStore
    @usableFromInline let stream: String
    private let ledger = Locked(Ledger())

    private struct Ledger {
        /// The stream's version, once read or written; `nil` after another writer got there first.
        var version: UInt64?
        /// The version up to which ``written`` holds what the stream says.
        var known: UInt64 = 0
        /// The streams marked, as written.
        var written: Set<String> = []
        /// The streams marked, as asked for (written, or on the way).
        var marked: Set<String> = []
        /// Marks and clears on the way, in order, with the callers waiting for a mark.
        var queue: [(stream: String, unfinished: Bool, waiter: CheckedContinuation<Bool, Never>?)] = []
        /// Whether a write is under way.
        var writing = false
        /// Records written since the last snapshot.
        var sinceSnapshot = 0
        /// Callers waiting for the queue to be written.
        var flushing: [CheckedContinuation<Void, Never>] = []
        /// Whether the marks were read back (once per group).
        var loaded = false

        /// Applies `changes` to the written marks.
        mutating func write(_ changes: [(stream: String, unfinished: Bool)]) {
            WorkLedger.apply(changes, to: &written)
        }

        /// The marks as asked for: those written, then the changes on the way.
        mutating func remark() {
            marked = written
            WorkLedger.apply(queue.map { ($0.stream, $0.unfinished) }, to: &marked)
        }
    }

    /// How many records a snapshot of the marks is saved after.
    let snapshotEvery: Int

    @usableFromInline
    init(store: any EventStore, stream: String, snapshotEvery: Int = 1_000) {
        self.store = store
        self.stream = stream
        self.snapshotEvery = max(1, snapshotEvery)
    }

    /// Reads the marks back: the streams marked; nothing after the first time (a group runs once).
    ///
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` when the store fails or a record does not decode.
    func load() async throws(DurableLoopError) -> Set<String> {
        let first = ledger.withLock { ledger -> Bool in
            defer { ledger.loaded = true }
            return !ledger.loaded
        }
        guard first else { return [] }
        var marked: Set<String> = []
        var version: UInt64 = 0
        var records = 0
        do {
            if let snapshot = try await store.latestSnapshot(of: stream) {
                do {
                    marked = try Self.marks(snapshot.payload)
                } catch {
                    throw Self.undecodable(.snapshot, at: snapshot.version, error, in: stream)
                }
                version = snapshot.version
            }
            for try await stored in store.events(of: stream, after: version) {
                do {
                    Self.apply(try Self.changes(stored.payload), to: &marked)
                } catch {
                    throw Self.undecodable(.event, at: stored.version, error, in: stream)
                }
                version = stored.version
                records += 1
            }
        } catch let error as DurableLoopError {
            throw error
        } catch {
            throw .storeFailed(DurableFailure(storeError: error, stream: stream, whileRecovering: true))
        }
        ledger.withLock { ledger in
            ledger.version = version
            ledger.known = version
            ledger.written = marked
            // Records since the snapshot count toward the next one, across restarts.
            ledger.sinceSnapshot = records
            // Changes asked for meanwhile stand.
            ledger.remark()
        }
        return marked
    }

    /// The error of a record of the marks that does not decode.
    private static func undecodable(
        _ kind: DurableFailure.Record,
        at version: UInt64,
        _ error: any Error,
        in stream: String
    ) -> DurableLoopError {
        .storeFailed(
            DurableFailure(
                .undecodable(kind, version: version, reason: "\(error)"),
                stream: stream,
                whileRecovering: true
            )
        )
    }

    /// Whether `stream` is marked (or its mark is on the way).
    @usableFromInline
    func isMarked(_ stream: String) -> Bool {
        ledger.withLock { $0.marked.contains(stream) }
    }

    /// Marks `stream`; returns once the mark is in the store: `true`, or `false` if the store failed.
    @usableFromInline
    func mark(_ stream: String) async -> Bool {
        await withCheckedContinuation { continuation in
            enqueue(stream, unfinished: true, waiter: continuation)
        }
    }

    /// Returns once every mark and clear asked for so far is written (or failed).
    func flush() async {
        await withCheckedContinuation { continuation in
            let idle = ledger.withLock { ledger -> Bool in
                guard ledger.writing else { return true }
                ledger.flushing.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Marks `stream` (`unfinished`) or clears its mark, without waiting for the store.
    @usableFromInline
    func change(_ stream: String, unfinished: Bool) {
        enqueue(stream, unfinished: unfinished, waiter: nil)
    }

    private func enqueue(_ stream: String, unfinished: Bool, waiter: CheckedContinuation<Bool, Never>?) {
        let start = ledger.withLock { ledger -> Bool in
            ledger.queue.append((stream, unfinished, waiter))
            Self.apply([(stream, unfinished)], to: &ledger.marked)
            guard !ledger.writing else { return false }
            ledger.writing = true
            return true
        }
        if start { Task { await self.write() } }
    }

    /// Writes what is queued, one record at a time, until the queue is empty.
    private func write() async {
        var conflicts = 0
        while true {
            var flushed: [CheckedContinuation<Void, Never>] = []
            let next = ledger.withLock {
                ledger -> [(stream: String, unfinished: Bool, waiter: CheckedContinuation<Bool, Never>?)]? in
                guard !ledger.queue.isEmpty else {
                    ledger.writing = false
                    flushed = ledger.flushing
                    ledger.flushing = []
                    return nil
                }
                defer { ledger.queue = [] }
                return ledger.queue
            }
            guard let batch = next else {
                for waiter in flushed { waiter.resume() }
                return
            }
            let changes = batch.map { (stream: $0.stream, unfinished: $0.unfinished) }
            let waiters = batch.compactMap(\.waiter)
            do {
                let version: UInt64
                if let known = ledger.withLock({ $0.version }) {
                    version = known
                } else {
                    version = try await catchUp()
                }
                let written = try await store.append([Self.record(changes)], to: stream, expecting: version)
                let snapshot = ledger.withLock { ledger -> Set<String>? in
                    ledger.version = written
                    ledger.known = written
                    ledger.write(changes)
                    ledger.sinceSnapshot += 1
                    guard ledger.sinceSnapshot >= snapshotEvery else { return nil }
                    ledger.sinceSnapshot = 0
                    return ledger.written
                }
                conflicts = 0
                for waiter in waiters { waiter.resume(returning: true) }
                if let snapshot {
                    // Saved aside, so marks waiting for the next record do not wait for it; one that cannot
                    // be saved costs only a longer read back.
                    let (store, stream) = (self.store, self.stream)
                    Task {
                        try? await store.save(
                            Snapshot(stream: stream, version: written, payload: Self.record(snapshot))
                        )
                    }
                }
            } catch let error as EventStoreError where conflicts < 3 && Self.isConflict(error) {
                // Another writer of the stream (a process still stopping, say): read what it wrote, try again.
                conflicts += 1
                ledger.withLock { ledger in
                    ledger.version = nil
                    ledger.queue = batch + ledger.queue
                }
            } catch {
                // This batch is not written: the appends waiting for its marks fail, and no stream counts
                // as marked by it.
                conflicts = 0
                ledger.withLock { $0.remark() }
                for waiter in waiters { waiter.resume(returning: false) }
            }
        }
    }

    /// Reads what another writer appended after the last record this one knows (so the next snapshot
    /// holds its marks too); returns the stream's version.
    private func catchUp() async throws -> UInt64 {
        let start = ledger.withLock { $0.known }
        var changes: [(stream: String, unfinished: Bool)] = []
        var version = start
        for try await stored in store.events(of: stream, after: start) {
            changes += try Self.changes(stored.payload)
            version = stored.version
        }
        ledger.withLock { ledger in
            ledger.write(changes)
            ledger.version = version
            ledger.known = version
            ledger.remark()
        }
        return version
    }

    /// Applies marks (`true`) and clears (`false`) to a set of marked streams, in order.
    static func apply(_ changes: [(stream: String, unfinished: Bool)], to marked: inout Set<String>) {
        for change in changes {
            if change.unfinished { marked.insert(change.stream) } else { marked.remove(change.stream) }
        }
    }

    static func isConflict(_ error: EventStoreError) -> Bool {
        if case .versionConflict = error.kind { true } else { false }
    }

    /// A record of changes: 1, their count, then each one's flag (1: marked, 0: cleared) and stream.
    static func record(_ changes: [(String, Bool)]) -> [UInt8] {
        var bytes: [UInt8] = [1]
        BinaryTag.putVarint(UInt64(changes.count), &bytes)
        for (stream, unfinished) in changes {
            bytes.append(unfinished ? 1 : 0)
            BinaryTag.putVarint(UInt64(stream.utf8.count), &bytes)
            bytes += stream.utf8
        }
        return bytes
    }

    /// A snapshot of the marked set: 2, its count, then each stream.
    static func record(_ marked: Set<String>) -> [UInt8] {
        var bytes: [UInt8] = [2]
        BinaryTag.putVarint(UInt64(marked.count), &bytes)
        for stream in marked.sorted() {
            BinaryTag.putVarint(UInt64(stream.utf8.count), &bytes)
            bytes += stream.utf8
        }
        return bytes
    }

    static func changes(_ bytes: [UInt8]) throws(CodecError) -> [(stream: String, unfinished: Bool)] {
        var reader = RecordEnvelope.Reader(bytes[...])
        guard try reader.byte() == 1 else { throw CodecError("not a record of marks") }
        var changes: [(stream: String, unfinished: Bool)] = []
        for _ in 0..<(try reader.count()) {
            let flag = try reader.byte()
            guard flag <= 1 else { throw CodecError("a mark of an unknown kind") }
            changes.append((try reader.text(), flag == 1))
        }
        guard reader.rest.isEmpty else { throw CodecError("bytes after the marks") }
        return changes
    }

    static func marks(_ bytes: [UInt8]) throws(CodecError) -> Set<String> {
        var reader = RecordEnvelope.Reader(bytes[...])
        guard try reader.byte() == 2 else { throw CodecError("not a snapshot of marks") }
        var marked: Set<String> = []
        for _ in 0..<(try reader.count()) { marked.insert(try reader.text()) }
        guard reader.rest.isEmpty else { throw CodecError("bytes after the marks") }
        return marked
    }
}
