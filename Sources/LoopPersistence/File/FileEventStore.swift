internal import Dispatch
internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// The embedded event store: a directory of append-only log files, with no server and no dependency.
///
/// ```swift
/// let store = try FileEventStore(directory: "/var/lib/orders")
/// let version = try await store.append([payload], to: "order-17", expecting: 0)  // durable now
/// ```
///
/// - **Durable when acknowledged**: ``append(_:to:expecting:)`` and ``save(_:)`` return after their
///   record is written and `fdatasync`ed.
/// - **Group commit**: appends from every loop and thread that arrive while a write is under way are
///   written together, in one `write` and one `fdatasync`.
/// - **Framed records**: every record carries its length and a CRC-32 (``RecordFrame``); a batch of
///   events is one record, so an append is all or nothing on disk too.
/// - **One writer**: the directory and its lock file (`store.lock`) are locked, admitting one open store
///   per directory; a second open, from this process or another, fails with
///   ``EventStoreError/Kind/unavailable(reason:)`` naming the holder, even if the lock file was deleted.
/// - **Repair on open**: a torn tail (a write the process did not finish) is truncated and reported
///   in ``opening``; damage before the tail is an error naming the file and offset. Nothing is skipped.
/// - **Failed writes**: when a write or `fdatasync` fails (ENOSPC, EIO), the log is cut back to its last
///   good record and the append fails; nothing acknowledged is lost. After a failed `fdatasync` the
///   store refuses further writes (the kernel may have dropped the data) until it is opened again.
///
/// - **Index checkpoint**: the index is saved when the store closes and when it seals a log file, and an
///   open reads it and only the log written after it; one that does not fit the log (damaged, or the
///   log changed under it) is refused and the whole log read (``Opening/checkpoint``).
///
/// Memory holds an index of a few words per stream (see `Docs/Persistence.md`), not the history.
public final class FileEventStore: AppendingWithCompletion {
    /// How the store lays out its files.
    public struct Options: Sendable {
        /// The size past which the store starts a new log file (64 MiB by default).
        public var segmentBytes: Int
        /// Open the store to read it only: nothing in the directory is created, locked, cut or written,
        /// so it works on a store another process has open (it reads the committed part, as of the
        /// open) and on a read-only file system. Appends and saves fail with `unavailable`.
        public var readOnly: Bool
        /// Open the store even when acknowledged events are gone (a log file deleted or cut short
        /// since the store last wrote its manifest); what is gone is in ``Opening/lost``. Without it,
        /// such a store does not open.
        public var acceptLoss: Bool
        /// Open from the index checkpoint (`store.index`) when it fits the log: read it and only the log
        /// written after it, not every log file. `false` reads the whole log, checking every record's
        /// checksum as it goes (what `loop-demo replay --store` does); a checkpoint that does not fit is
        /// never used either way. See ``Opening/checkpoint``.
        public var indexCheckpoint: Bool
        /// Which events the store keeps. With ``Retention/afterSnapshots(_:)``, a background compaction
        /// removes the rest: whenever a log file is sealed, the oldest log files whose records are at
        /// least half gone are emptied (the records a stream still keeps are copied to the end of the
        /// log) and deleted. See ``compact()``.
        public var retention: Retention

        /// Options with the defaults: 64 MiB log files, read and write, no loss accepted, opening from the
        /// index checkpoint, every event kept.
        public init(
            segmentBytes: Int = 64 * 1_024 * 1_024,
            readOnly: Bool = false,
            acceptLoss: Bool = false,
            indexCheckpoint: Bool = true,
            retention: Retention = .keepAll
        ) {
            self.segmentBytes = segmentBytes
            self.readOnly = readOnly
            self.acceptLoss = acceptLoss
            self.indexCheckpoint = indexCheckpoint
            self.retention = retention
        }
    }

    /// What an open made of the index checkpoint: a saved copy of the index as of a point in the log,
    /// written when the store closes and, in the background, when it starts a new log file.
    public enum CheckpointUse: Hashable, Sendable {
        /// There was none (a new store, one that never closed or filled a log file), or
        /// ``Options/indexCheckpoint`` was off: the whole log was read.
        case none
        /// The index came from the checkpoint: `events` of the store's events were in it, and the
        /// `skippedBytes` of log it covers were not read.
        case used(events: UInt64, skippedBytes: Int)
        /// There was one, but it did not fit the log (damaged, or the log changed under it: a file
        /// deleted, cut or replaced): the whole log was read instead. A store opened to write removes it.
        case refused(reason: String)
    }

    /// What opening the store found.
    public struct Opening: Hashable, Sendable {
        /// The log files read (those compaction removed not counted).
        public var segments: Int
        /// The streams found.
        public var streams: Int
        /// The events of every stream: the sum of their versions (counting events a retention policy
        /// removed).
        public var events: UInt64
        /// A torn tail cut off the last log file, if there was one: a write that did not finish, so
        /// never acknowledged. A store opened read-only cuts nothing: this is then the part it did not
        /// read.
        public var truncated: TruncatedTail?
        /// Acknowledged events found gone, when the store was opened with ``Options/acceptLoss``.
        public var lost: Loss?
        /// Whether the index came from the checkpoint, and if one was refused, why.
        public var checkpoint: CheckpointUse

        /// Creates a description of an opening.
        public init(
            segments: Int,
            streams: Int,
            events: UInt64,
            truncated: TruncatedTail?,
            lost: Loss? = nil,
            checkpoint: CheckpointUse = .none
        ) {
            self.segments = segments
            self.streams = streams
            self.events = events
            self.truncated = truncated
            self.lost = lost
            self.checkpoint = checkpoint
        }
    }

    /// Acknowledged events that are gone from the log: what the store's manifest counted and the log no
    /// longer holds.
    public struct Loss: Hashable, Sendable, CustomStringConvertible {
        /// How many events are gone (at least: events appended after the manifest was written are not
        /// counted in it).
        public var events: UInt64
        /// What is missing, in words: the file, and where it ends.
        public var reason: String

        /// Creates a description of a loss.
        public init(events: UInt64, reason: String) {
            self.events = events
            self.reason = reason
        }

        /// A sentence for a log.
        public var description: String { "\(events) acknowledged events are gone: \(reason)" }
    }

    /// An incomplete record at the end of the log, removed on open.
    public struct TruncatedTail: Hashable, Sendable, CustomStringConvertible {
        /// The log file.
        public var file: String
        /// Where the incomplete record started; the file now ends there.
        public var offset: Int
        /// How many bytes were cut.
        public var bytes: Int

        /// Creates a description of a cut tail.
        public init(file: String, offset: Int, bytes: Int) {
            self.file = file
            self.offset = offset
            self.bytes = bytes
        }

        /// A sentence for a log.
        public var description: String { "cut \(bytes) bytes of an unfinished write at offset \(offset) of \(file)" }
    }

    /// What the store has written since it was opened.
    public struct Statistics: Hashable, Sendable {
        /// Events appended.
        public var events: UInt64 = 0
        /// Records written (a batch of events, or a snapshot).
        public var records: UInt64 = 0
        /// Bytes written.
        public var bytes: Int = 0
        /// `fdatasync` calls: one per group commit.
        public var syncs: Int = 0
    }

    /// What the store has written since it was opened; `records / syncs` is the group commit's batch.
    public var statistics: Statistics {
        shared.withLock { $0.statistics }
    }

    /// How many appends and saves wait for the writer now. For tests, which wait for a batch to form.
    package var queuedOperations: Int {
        shared.withLock { $0.commits.count }
    }

    /// What opening the store found: the files read, the streams and events, and a torn tail it cut.
    public let opening: Opening

    /// The directory.
    public let directory: String

    private let options: Options
    /// How many snapshots of a stream the index keeps track of (checkpoints say so).
    private let tracked: Int
    private let io: any StoreIO
    private let writer = DispatchQueue(label: "FileEventStore.writer")
    /// Writes index checkpoints, one at a time, beside the writer.
    private let checkpointer = DispatchQueue(label: "FileEventStore.checkpointer", qos: .utility)
    /// Runs compaction passes, one at a time, beside the writer.
    private let compactor = DispatchQueue(label: "FileEventStore.compactor", qos: .utility)
    private let shared: Locked<Shared>
    private let lockDescriptor: Int32
    /// The directory itself, locked too: a lock file can be deleted (and a new one made and locked by
    /// another process) while this store runs; the directory cannot be, while it holds the log.
    private let directoryDescriptor: Int32

    /// Opens (or creates) the store in `directory`, repairing a torn tail.
    ///
    /// - Throws: ``EventStoreError`` when another store holds the directory (`unavailable`), when the log
    ///   is damaged before its tail (`corrupted`, naming the file and offset), or on an I/O failure.
    public convenience init(directory: String, options: Options = Options()) throws(EventStoreError) {
        try self.init(directory: directory, options: options, io: SystemIO())
    }

    /// Opens the store writing through `io` (a test's, to simulate a failing disk).
    package init(directory: String, options: Options = Options(), io: any StoreIO) throws(EventStoreError) {
        guard options.segmentBytes > 0, options.segmentBytes < 1 << 39 else {
            throw EventStoreError(.invalid(reason: "a segment size of \(options.segmentBytes) bytes"))
        }
        self.directory = directory
        self.options = options
        tracked = options.retention.trackedSnapshots
        self.io = io
        if options.readOnly {
            (lockDescriptor, directoryDescriptor) = (-1, -1)
            let opened = try Self.readLogReadOnly(directory: directory, io: io, options: options)
            opening = opened.opening
            shared = Locked(Shared(opened))
            return
        }
        try Files.makeDirectory(directory)
        (lockDescriptor, directoryDescriptor) = try Self.lock(directory)
        var descriptors: [Int32] = []
        do throws(EventStoreError) {
            var opened = try Self.readLog(directory: directory, io: io, options: options)
            descriptors = opened.segments
            if opened.segments.count == opened.first {
                let descriptor = try Files.openFile(Self.path(of: opened.segments.count, in: directory), create: true)
                opened.segments.append(descriptor)
                descriptors = opened.segments
                opened.size = 0
                opened.opening.segments = 1
                try Files.syncDirectory(directory)
            }
            opening = opened.opening
            shared = Locked(Shared(opened))
        } catch {
            for descriptor in descriptors { Files.release(descriptor) }
            Files.unlockAndRelease(lockDescriptor)
            Files.unlockAndRelease(directoryDescriptor)
            throw error
        }
        // What is there now is what the store stands by: a later open finds less only by loss.
        writeManifest(clean: false)
        // A checkpoint this open did not use (refused, or not asked for) may stop fitting the log as this
        // store writes (a cut below what it covers, then the same lengths written again): it goes.
        if case .used = opening.checkpoint {} else { IndexCheckpoint.remove(in: directory) }
    }

    deinit {
        shared.withLock { shared in
            for descriptor in shared.segments + shared.retired.map(\.descriptor) where descriptor >= 0 {
                Files.release(descriptor)
            }
            shared.segments = []
            shared.retired = []
        }
        if lockDescriptor >= 0 { Files.unlockAndRelease(lockDescriptor) }
        if directoryDescriptor >= 0 { Files.unlockAndRelease(directoryDescriptor) }
    }

    /// Closes the store: waits for the write under way, fails appends still queued, records in its
    /// manifest how far the log is committed (so a later open finds any loss), and releases the
    /// directory to the next process. Every later call fails with `unavailable`.
    public func close() async {
        let queued = shared.withLock { shared -> [Queued]? in
            // A second close has nothing to do: the first released the directory.
            guard !shared.closed else { return nil }
            shared.closed = true
            return shared.commits.removeAll()
        }
        guard let queued else { return }
        for operation in queued { operation.finish(.failure(Self.closedError)) }
        // A compaction pass under way stops at its next step (its reads and writes now fail).
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in compactor.async { done.resume() } }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            writer.async {
                // Runs after any flush already scheduled on the writer: nothing writes after this.
                if !self.options.readOnly {
                    // A closed store's last log file ends at its last commit, as a sealed one does.
                    let (last, size) = self.shared.withLock { ($0.segments.last, $0.size) }
                    // A checkpoint still being written in the background ends first: nothing of this
                    // store writes after the next one opens the directory, and whether it was written
                    // is known.
                    self.checkpointer.sync {}
                    if let last, self.shared.withLock({ $0.broken == nil }), self.io.truncate(last, to: size) == 0 {
                        self.checkpoint(last: last, size: size)
                    }
                    self.writeManifest(clean: true)
                    _ = flock(self.lockDescriptor, LOCK_UN)
                    _ = flock(self.directoryDescriptor, LOCK_UN)
                }
                done.resume()
            }
        }
    }

    // MARK: EventStore

    /// See ``EventStore/append(_:to:expecting:)``. Returns once the events are on disk.
    public func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64
    ) async throws
        -> UInt64
    {
        if let decided = try immediateOutcome(payloads, to: stream, expecting: expectedVersion).get() {
            return decided
        }
        return try await withCheckedThrowingContinuation { continuation in
            submit(
                .append(stream: stream, payloads: payloads, expected: expectedVersion),
                .continuation(continuation)
            )
        }
    }

    /// See ``AppendingWithCompletion``: calls `completion` from the writer's thread once the events are
    /// on disk (at once, on this thread, for an append refused before it is queued).
    @usableFromInline
    package func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64,
        then completion: @escaping @Sendable (Result<UInt64, EventStoreError>) -> Void
    ) {
        switch immediateOutcome(payloads, to: stream, expecting: expectedVersion) {
        case .success(let decided?): completion(.success(decided))
        case .failure(let error): completion(.failure(error))
        case .success(nil):
            submit(.append(stream: stream, payloads: payloads, expected: expectedVersion), .callback(completion))
        }
    }

    /// The outcome of an append decided without the writer (an empty batch, one too large), or `nil`.
    private func immediateOutcome(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64
    ) -> Result<UInt64?, EventStoreError> {
        if payloads.isEmpty {
            let version: UInt64
            do throws(EventStoreError) {
                version = try view(of: stream).entry?.version ?? 0
            } catch {
                return .failure(error)
            }
            guard version == expectedVersion else {
                return .failure(
                    EventStoreError(.versionConflict(expected: expectedVersion, actual: version), stream: stream)
                )
            }
            return .success(version)
        }
        let size = LogRecord.framedSize(stream: stream, payloads: payloads)
        guard size - RecordFrame.headerSize <= RecordFrame.maximumPayload else {
            return .failure(
                EventStoreError(
                    .invalid(reason: "a batch of \(size) bytes, past the limit of \(RecordFrame.maximumPayload)"),
                    stream: stream
                )
            )
        }
        return .success(nil)
    }

    /// See ``EventStore/read(_:after:limit:)``.
    public func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
        try reading(stream) { (entry, segments) throws(EventStoreError) in
            guard let entry else { return [] }
            let kept = entry.retainedAfter(keep: options.retention.keptSnapshots)
            guard version >= kept || version >= entry.version else {
                throw EventStoreError(
                    .invalid(
                        reason:
                            "events up to version \(kept) are not kept (\(options.retention)): read after \(kept) or later"
                    ),
                    stream: stream
                )
            }
            return try events(of: stream, entry: entry, segments: segments, after: version, limit: limit)
        }
    }

    /// The events of `stream` (whose index entry is `entry`) after `version`, at most `limit`, read from
    /// the log files open as `segments`.
    private func events(
        of stream: String,
        entry: StreamEntry,
        segments: [Int32],
        after version: UInt64,
        limit: Int,
        available: Bool = false
    ) throws(EventStoreError) -> [StoredEvent] {
        guard version < entry.version, limit > 0 else { return [] }
        let last = version + min(UInt64(limit), entry.version - version)
        var batches: [(first: UInt64, payloads: [[UInt8]])] = []
        var location = entry.start(for: last)
        var reached = false
        var earliest = entry.version + 1
        func removed() -> EventStoreError {
            EventStoreError(
                .invalid(
                    reason: "events before version \(earliest) were removed by compaction (the store's retention)"
                ),
                stream: stream
            )
        }
        while location != .none {
            guard location.segment >= segments.count || segments[location.segment] >= 0 else {
                // With `available`, the events left after those compaction removed.
                if available {
                    reached = true
                    break
                }
                throw removed()
            }
            let record = try readRecord(at: location, segments: segments)
            guard let (found, first, previous, payloads) = record.events, found == stream else {
                throw corruption(at: location, "the record is not an events record of '\(stream)'")
            }
            if first <= last { batches.append((first, payloads)) }
            if first <= version + 1 {
                reached = true
                break
            }
            earliest = first
            if previous == .none, case .relocated = record {
                if available {
                    reached = true
                    break
                }
                throw removed()
            }
            location = previous
        }
        guard reached else {
            throw EventStoreError(
                .corrupted(location: directory, reason: "the chain of records ends before version \(version + 1)"),
                stream: stream
            )
        }
        var events: [StoredEvent] = []
        events.reserveCapacity(Int(last - version))
        for batch in batches.reversed() {
            for (index, payload) in batch.payloads.enumerated() {
                let eventVersion = batch.first + UInt64(index)
                if eventVersion > version && eventVersion <= last {
                    events.append(StoredEvent(stream: stream, version: eventVersion, payload: payload))
                }
            }
        }
        return events
    }

    /// Calls `body` with `stream`'s index entry and the log files' descriptors, which stay open until it
    /// returns: compaction closes a removed file's descriptor only once no read that could use it runs.
    private func reading<Value>(
        _ stream: String,
        _ body: (StreamEntry?, [Int32]) throws(EventStoreError) -> Value
    ) throws(EventStoreError) -> Value {
        let view = shared.withLock { shared -> (StreamEntry?, [Int32], UInt64)? in
            guard !shared.closed else { return nil }
            shared.readers += 1
            return (shared.streams[stream], shared.segments, shared.epoch)
        }
        guard let (entry, segments, epoch) = view else { throw Self.closedError }
        defer {
            let unused = shared.withLock { shared -> [Int32] in
                if epoch == shared.epoch {
                    shared.readers -= 1
                    return []
                }
                shared.lingeringReads[epoch, default: 1] -= 1
                if shared.lingeringReads[epoch] == 0 { shared.lingeringReads[epoch] = nil }
                return shared.releasable()
            }
            for descriptor in unused { Files.release(descriptor) }
        }
        return try body(entry, segments)
    }

    /// The name of every stream in the store, sorted: for a tool that goes over a whole store (the
    /// check before a deploy, ``StoreReplay/verify(store:streams:program:events:states:)``).
    public func streamNames() throws(EventStoreError) -> [String] {
        let names = shared.withLock { shared -> [String]? in
            guard !shared.closed else { return nil }
            var names: [String] = []
            names.reserveCapacity(shared.streams.count)
            shared.streams.forEveryStream { stream, _ in names.append(stream) }
            return names
        }
        guard let names else { throw Self.closedError }
        return names.sorted()
    }

    /// See ``EventStore/version(of:)``.
    public func version(of stream: String) async throws -> UInt64 {
        try view(of: stream).entry?.version ?? 0
    }

    /// See ``EventStore/save(_:)``. Returns once the snapshot is on disk.
    public func save(_ snapshot: Snapshot) async throws {
        let size = RecordFrame.headerSize + 13 + snapshot.stream.utf8.count + snapshot.payload.count
        guard size - RecordFrame.headerSize <= RecordFrame.maximumPayload else {
            throw EventStoreError(
                .invalid(reason: "a snapshot of \(size) bytes, past the limit"),
                stream: snapshot.stream
            )
        }
        _ = try await withCheckedThrowingContinuation { continuation in
            submit(.save(snapshot), .continuation(continuation))
        }
    }

    /// See ``EventStore/latestSnapshot(of:)``.
    public func latestSnapshot(of stream: String) async throws -> Snapshot? {
        try reading(stream) { (entry, segments) throws(EventStoreError) in
            guard let entry, entry.snapshot != .none else { return nil }
            return try snapshot(of: stream, at: entry.snapshot, segments: segments)
        }
    }

    /// The snapshot of `stream` at `location`.
    private func snapshot(
        of stream: String,
        at location: Location,
        segments: [Int32]
    ) throws(EventStoreError)
        -> Snapshot
    {
        guard case .snapshot(let snapshot) = try readRecord(at: location, segments: segments),
            snapshot.stream == stream
        else { throw corruption(at: location, "the record is not a snapshot of '\(stream)'") }
        return snapshot
    }

    // MARK: Shared state

    /// A write waiting for the writer.
    enum Operation {
        case append(stream: String, payloads: [[UInt8]], expected: UInt64)
        case save(Snapshot)
        /// Compaction's copy of what a stream keeps, to the end of the log.
        case relocate(Relocation)

        var stream: String {
            switch self {
            case .append(let stream, _, _): stream
            case .save(let snapshot): snapshot.stream
            case .relocate(let relocation): relocation.stream
            }
        }
    }

    /// What compaction copies of one stream: the events it keeps (when `events` is not `nil`: those from
    /// version `from` to `version`, which the writer completes with any appended since) and snapshots,
    /// each with where it was read (copied only if the stream still keeps that record: a save of the same
    /// version since replaced it).
    struct Relocation {
        let stream: String
        let from: UInt64
        let version: UInt64
        let events: [[UInt8]]?
        let snapshots: [(snapshot: Snapshot, source: Location)]
    }

    struct Queued {
        let operation: Operation
        let waiter: Waiter

        /// Tells whoever waits for the operation how it ended.
        func finish(_ result: Result<UInt64, EventStoreError>) {
            switch waiter {
            case .continuation(let continuation): continuation.resume(with: result.mapError { $0 })
            case .callback(let callback): callback(result)
            }
        }
    }

    /// Who waits for a queued operation: a suspended task, or a callback the writer calls.
    enum Waiter {
        case continuation(CheckedContinuation<UInt64, any Error>)
        case callback(@Sendable (Result<UInt64, EventStoreError>) -> Void)
    }

    struct Shared {
        var streams: StreamTable
        /// One descriptor per log file, in order; the last is the one written.
        var segments: [Int32]
        /// The good length of the last log file.
        var size: Int
        /// The length of the last log file: past `size`, zeros written ahead (see ``preallocate``).
        var allocated: Int
        /// The events in the log.
        var events: UInt64
        /// The sequence number of the manifest written last.
        var manifestSequence: UInt64 = 0
        /// The committed bytes of the log files before the last.
        var sealed = 0
        /// The log files before the last, as an index checkpoint describes them.
        var sealedFiles: [IndexCheckpoint.Covered]
        /// The bytes of log the newest index checkpoint covers.
        var checkpointed: Int
        /// The size of the newest index checkpoint, or 0 if none was written by this store.
        var checkpointSize = 0
        /// The operations waiting for the writer.
        var commits = GroupCommit<Queued>()
        var closed = false
        /// Set when the log can no longer be trusted (a failed `fdatasync`, a failed rollback).
        var broken: EventStoreError?
        var statistics = Statistics()
        /// The first log file kept: compaction removed those before it (their descriptors are -1).
        var first = 0
        /// Reads under way (``reading(_:_:)``), and the descriptors of removed log files they may
        /// still use: closed when none runs.
        /// Reads under way that started in this epoch; each removal of a log file starts a new one, and
        /// the reads of earlier epochs still under way are counted in `lingeringReads`.
        var readers = 0
        var epoch: UInt64 = 0
        var lingeringReads: [UInt64: Int] = [:]
        /// Descriptors of removed log files, with the epoch they were removed in: reads of that epoch or
        /// before may still use them.
        var retired: [(descriptor: Int32, epoch: UInt64)] = []

        /// Takes out the retired descriptors no read in progress can use (the reads that started before
        /// their removal have all ended).
        mutating func releasable() -> [Int32] {
            guard !retired.isEmpty else { return [] }
            let oldest = lingeringReads.keys.min() ?? epoch
            let unused = retired.filter { $0.epoch < oldest }.map(\.descriptor)
            if !unused.isEmpty { retired.removeAll { $0.epoch < oldest } }
            return unused
        }

        /// Whether a compaction pass is queued or running.
        var compacting = false
        /// The number of log files before which no compaction starts by itself: a pass that found nothing
        /// worth doing waits for more.
        var compactionHeld = 0

        /// The state of a store just opened on what `opened` found.
        init(_ opened: Opened) {
            streams = opened.streams
            segments = opened.segments
            size = opened.size
            allocated = max(opened.allocated, opened.size)
            events = opened.opening.events
            manifestSequence = opened.manifestSequence
            sealed = opened.sizes.dropLast().reduce(0, +)
            sealedFiles = opened.sealedFiles
            checkpointed = opened.checkpointed
            first = opened.first
        }
    }

    static let closedError = EventStoreError(.unavailable(reason: "the store is closed"))

    private var readOnlyError: EventStoreError {
        EventStoreError(.unavailable(reason: "the store at \(directory) is open read-only"))
    }

    /// Records in the manifest how far the log is committed now (with the next log file listed, when
    /// `rolling`); when opening, or on the writer queue. A store whose log cannot be trusted (a failed
    /// sync) records nothing. Returns whether it was written.
    ///
    /// A manifest that cannot be written leaves the older one, which claims less: loss after it is
    /// then taken for a torn tail, as without manifests. Its sequence number is not used up, so the
    /// next write does not overwrite the slot of the last good one.
    @discardableResult
    private func writeManifest(clean: Bool, rolling: Bool = false) -> Bool {
        let manifest = shared.withLock { shared -> Manifest? in
            guard shared.broken == nil else { return nil }
            return Manifest(
                segments: shared.segments.count + (rolling ? 1 : 0),
                first: shared.first,
                committed: rolling ? 0 : shared.size,
                bytes: shared.sealed + shared.size,
                events: shared.events,
                clean: clean,
                sequence: shared.manifestSequence + 1
            )
        }
        guard let manifest, (try? manifest.write(in: directory)) != nil else { return false }
        shared.withLock { $0.manifestSequence = manifest.sequence }
        return true
    }

    private func view(of stream: String) throws(EventStoreError) -> (entry: StreamEntry?, segments: [Int32]) {
        let view = shared.withLock { shared in
            shared.closed ? nil : (shared.streams[stream], shared.segments)
        }
        guard let view else { throw Self.closedError }
        return view
    }

    /// Queues `operation` for the writer; `waiter` hears how it ended.
    private func submit(_ operation: Operation, _ waiter: Waiter) {
        let queued = Queued(operation: operation, waiter: waiter)
        let (start, refusal) = shared.withLock { shared -> (Bool, EventStoreError?) in
            if shared.closed { return (false, Self.closedError) }
            if options.readOnly { return (false, readOnlyError) }
            if let broken = shared.broken { return (false, broken) }
            return (shared.commits.enqueue(queued), nil)
        }
        if let refusal {
            queued.finish(.failure(EventStoreError(refusal.kind, stream: operation.stream)))
        } else if start {
            writer.async { self.flushWhileQueued() }
        }
    }

    // MARK: Writing (on the writer queue only)

    /// Writes what is queued, batch after batch, until nothing is.
    private func flushWhileQueued() {
        while true {
            var stranded: (queued: [Queued], error: EventStoreError)?
            let batch = shared.withLock { shared -> Batch? in
                if let broken = shared.broken {
                    // What was queued behind the write that broke the store fails now, not at close.
                    stranded = (shared.commits.removeAll(), broken)
                }
                // A closed store's queue is empty: `close()` took out what waited, and takes no more.
                guard let queued = shared.commits.nextBatch() else { return nil }
                var streams: [String: StreamEntry] = [:]
                for queued in queued {
                    streams[queued.operation.stream] = shared.streams[queued.operation.stream]
                }
                return Batch(
                    queued: queued,
                    streams: streams,
                    segment: shared.segments.count - 1,
                    descriptor: shared.segments[shared.segments.count - 1],
                    size: shared.size,
                    allocated: shared.allocated
                )
            }
            if let stranded {
                for queued in stranded.queued {
                    queued.finish(.failure(EventStoreError(stranded.error.kind, stream: queued.operation.stream)))
                }
            }
            guard var batch else { return }
            flush(&batch)
        }
    }

    struct Batch {
        let queued: [Queued]
        /// The entries of the streams the batch touches, updated as it is encoded.
        var streams: [String: StreamEntry]
        let segment: Int
        let descriptor: Int32
        let size: Int
        /// The file's length, zeros written ahead included; what the write leaves it at.
        var allocated: Int
        var bytes: [UInt8] = []
        var results: [Result<UInt64, EventStoreError>] = []
        var events: UInt64 = 0
        var records: UInt64 = 0
    }

    private func flush(_ batch: inout Batch) {
        // Relocations first: the events a stream gained since compaction read it are then all on disk,
        // where the writer reads them to complete the copy. Each keeps the stream's version, so the order
        // changes nothing for the appends.
        // Read by index from a copy of the array (one reference): iterating `batch.queued` copied every
        // operation, payloads and waiter, and the copies were 4.6% of w7 (`Docs/Performance.md`).
        let queued = batch.queued
        batch.results = Array(repeating: .success(0), count: queued.count)
        for index in queued.indices {
            if case .relocate(let relocation) = queued[index].operation {
                batch.results[index] = relocate(relocation, &batch)
            }
        }
        for index in queued.indices {
            if case .relocate = queued[index].operation { continue }
            batch.results[index] = encode(queued[index].operation, into: &batch)
        }
        if !batch.bytes.isEmpty {
            RecordFrame.append(framing: LogRecord.commit(start: UInt64(batch.size)).encode(), to: &batch.bytes)
        }
        if !batch.bytes.isEmpty, let failure = write(&batch) {
            let cause = failure.error
            shared.withLock { shared in
                if failure.breaks { shared.broken = Self.broken(by: cause, in: directory) }
            }
            for index in queued.indices {
                // A refusal (a version conflict, say) stands; what would have been written fails.
                if case .failure(let refusal) = batch.results[index] {
                    queued[index].finish(.failure(refusal))
                } else {
                    queued[index].finish(.failure(EventStoreError(cause.kind, stream: queued[index].operation.stream)))
                }
            }
            return
        }
        let grown = batch.size + batch.bytes.count
        shared.withLock { shared in
            for (stream, entry) in batch.streams { shared.streams[stream] = entry }
            shared.size = grown
            shared.allocated = batch.allocated
            shared.events += batch.events
            shared.statistics.events += batch.events
            shared.statistics.records += batch.records
            shared.statistics.bytes += batch.bytes.count
            shared.statistics.syncs += 1
        }
        for index in queued.indices { queued[index].finish(batch.results[index]) }
        if grown >= options.segmentBytes { roll(after: batch.segment) }
    }

    /// Adds `operation`'s record to the batch, or says why it is refused.
    private func encode(_ operation: Operation, into batch: inout Batch) -> Result<UInt64, EventStoreError> {
        let stream = operation.stream
        var entry = batch.streams[stream] ?? StreamEntry()
        let location = Location(segment: batch.segment, offset: batch.size + batch.bytes.count)
        switch operation {
        case .append(_, let payloads, let expected):
            guard entry.version == expected else {
                return .failure(
                    EventStoreError(.versionConflict(expected: expected, actual: entry.version), stream: stream)
                )
            }
            let first = entry.version + 1
            let record = LogRecord.events(stream: stream, first: first, previous: entry.tail, payloads: payloads)
            RecordFrame.append(framing: record.encode(), to: &batch.bytes)
            batch.events += UInt64(payloads.count)
            batch.records += 1
            entry.appended(first: first, count: payloads.count, at: location)
        case .save(let snapshot):
            guard snapshot.version <= entry.version else {
                let reason = "snapshot at version \(snapshot.version) is past the stream's \(entry.version)"
                return .failure(EventStoreError(.invalid(reason: reason), stream: stream))
            }
            guard entry.snapshot == .none || snapshot.version >= entry.snapshotVersion else {
                return .success(entry.version)
            }
            RecordFrame.append(framing: LogRecord.snapshot(snapshot).encode(), to: &batch.bytes)
            batch.records += 1
            entry.saved(snapshot.version, at: location, keep: options.retention.trackedSnapshots)
        case .relocate:
            return .failure(EventStoreError(.invalid(reason: "a relocation among appends"), stream: stream))
        }
        batch.streams[stream] = entry
        return .success(entry.version)
    }

    /// Adds the records of a relocation to the batch: the stream's kept events as relocated records
    /// (the first restarts its chain), with those appended since compaction read them, and copies of its
    /// kept snapshots. Nothing is added if it fails.
    private func relocate(_ relocation: Relocation, _ batch: inout Batch) -> Result<UInt64, EventStoreError> {
        let stream = relocation.stream
        var entry = batch.streams[stream] ?? StreamEntry()
        var bytes: [UInt8] = []
        var records: UInt64 = 0
        func location() -> Location {
            Location(segment: batch.segment, offset: batch.size + batch.bytes.count + bytes.count)
        }
        if var payloads = relocation.events {
            guard relocation.version <= entry.version, relocation.from <= relocation.version + 1 else {
                return .failure(
                    EventStoreError(.invalid(reason: "a relocation of version \(relocation.version)"), stream: stream)
                )
            }
            if entry.version > relocation.version {
                // Appended since compaction read the stream: committed, so on disk.
                let segments = shared.withLock { $0.segments }
                do throws(EventStoreError) {
                    let since = try events(
                        of: stream,
                        entry: entry,
                        segments: segments,
                        after: relocation.version,
                        limit: Int(entry.version - relocation.version)
                    )
                    payloads += since.map(\.payload)
                } catch {
                    return .failure(error)
                }
            }
            var fresh = StreamEntry()
            fresh.snapshots = entry.snapshots
            fresh.version = relocation.from - 1
            var previous = Location.none
            var start = 0
            repeat {
                // Records of at most a megabyte (or one event), so reading a few events reads little.
                var end = start
                var size = 0
                while end < payloads.count, end == start || size + payloads[end].count <= 1 << 20 {
                    size += 4 + payloads[end].count
                    end += 1
                }
                let at = location()
                let first = fresh.version + 1
                let chunk = Array(payloads[start..<end])
                RecordFrame.append(
                    framing: LogRecord.relocated(stream: stream, first: first, previous: previous, payloads: chunk)
                        .encode(),
                    to: &bytes
                )
                records += 1
                if previous == .none { fresh.chainStart = at }
                if chunk.isEmpty { fresh.tail = at } else { fresh.appended(first: first, count: chunk.count, at: at) }
                previous = at
                start = end
            } while start < payloads.count
            guard fresh.version == entry.version else {
                return .failure(
                    EventStoreError(
                        .corrupted(
                            location: directory,
                            reason: "relocated \(fresh.version) of \(entry.version) events"
                        ),
                        stream: stream
                    )
                )
            }
            entry = fresh
        }
        for (snapshot, source) in relocation.snapshots where entry.snapshots.contains(where: { $0.location == source })
        {
            let at = location()
            RecordFrame.append(framing: LogRecord.snapshot(snapshot).encode(), to: &bytes)
            records += 1
            entry.saved(snapshot.version, at: at, keep: options.retention.trackedSnapshots)
        }
        batch.bytes += bytes
        batch.records += records
        batch.streams[stream] = entry
        return .success(entry.version)
    }

    /// Writes and syncs the batch's bytes after the last good record (with zeros written ahead when it
    /// reaches the end of those written before); on failure cuts the file back to that record and says
    /// whether the store can still be trusted.
    private func write(_ batch: inout Batch) -> (error: EventStoreError, breaks: Bool)? {
        let path = Self.path(of: batch.segment, in: directory)
        var done = 0
        var failure: (code: Int32, operation: String)?
        batch.bytes.withUnsafeBytes { bytes in
            while done < bytes.count {
                let written = io.write(
                    batch.descriptor,
                    UnsafeRawBufferPointer(rebasing: bytes[done...]),
                    at: batch.size + done
                )
                if written == -Int(EINTR) { continue }
                guard written > 0 else {
                    failure = (written == 0 ? EIO : Int32(-written), "write to \(path)")
                    return
                }
                done += written
            }
        }
        if failure == nil {
            let end = batch.size + batch.bytes.count
            if end > batch.allocated { batch.allocated = preallocate(batch.descriptor, from: end) }
            let code = io.sync(batch.descriptor)
            if code != 0 { failure = (-code, "sync \(path)") }
        }
        guard let failure else { return nil }
        let error = EventStoreError(.io(code: failure.code, operation: failure.operation))
        // Cut back to the last good record, so no half record stays before the next good one.
        var cut = io.truncate(batch.descriptor, to: batch.size)
        if cut == 0 { cut = io.sync(batch.descriptor) }
        shared.withLock { $0.allocated = batch.size }
        // After a failed fdatasync the kernel may have dropped the written pages: what the file holds is
        // unknown, so the store stops writing until it is opened (and its log read) again.
        return (error, cut != 0 || failure.operation.hasPrefix("sync"))
    }

    /// Writes zeros after `end` in the last log file, up to one chunk (4 MiB, or a segment if smaller),
    /// synced with the batch that reached `end`; returns the file's length. The batches after it then
    /// overwrite bytes the file already has, so their `fdatasync` writes no metadata (the file's size):
    /// measured on this machine, 146 -> 100 µs a sync and 64 -> 45 µs of processor (Docs/Performance.md).
    /// Zeros after the last commit read as space written ahead, not as an unfinished write. It is an
    /// optimisation only: if the zeros cannot be written (a full disk), the batch stands and the file
    /// ends at `end`.
    private func preallocate(_ descriptor: Int32, from end: Int) -> Int {
        let chunk = min(Self.preallocation, options.segmentBytes)
        var done = 0
        while done < chunk {
            let written = Self.zeros.withUnsafeBytes { zeros in
                pwrite(descriptor, zeros.baseAddress, min(zeros.count, chunk - done), off_t(end + done))
            }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { break }
            done += written
        }
        return end + done
    }

    /// How far ahead the last log file is zero-filled.
    static let preallocation = 4 * 1_024 * 1_024
    private static let zeros = [UInt8](repeating: 0, count: 256 * 1_024)

    static func broken(by error: EventStoreError, in directory: String) -> EventStoreError {
        EventStoreError(
            .unavailable(reason: "an earlier write failed (\(error)); open the store at \(directory) again")
        )
    }

    /// Writes an index checkpoint of the whole log, whose last file, open as `last`, is committed up to
    /// `size`, unless the newest one covers all of it already; on the writer queue, when closing. A
    /// checkpoint that cannot be written leaves the older one, which is still valid.
    private func checkpoint(last: Int32, size: Int) {
        let state = shared.withLock { shared in
            shared.checkpointed < shared.sealed + size && shared.sealedFiles.count == shared.segments.count - 1
                ? (shared.streams, shared.events, shared.sealedFiles) : nil
        }
        guard let (streams, events, sealed) = state else { return }
        let path = Self.path(of: sealed.count, in: directory)
        guard let fingerprint = try? IndexCheckpoint.fingerprint(last, committed: size, path: path) else { return }
        let covered = sealed + [IndexCheckpoint.Covered(committed: size, fingerprint: fingerprint)]
        let directory = directory
        checkpointer.sync {
            _ = try? IndexCheckpoint.write(
                streams: streams,
                events: events,
                segments: covered,
                tracking: tracked,
                in: directory
            )
        }
    }

    /// After a log file is sealed, writes an index checkpoint of the sealed files in the background, when
    /// the log written since the last one is at least four times the checkpoint's size (so checkpoints
    /// cost at most a quarter more writing, and a store of many small streams does not write its whole
    /// index every log file). The writer goes on meanwhile; the index it changes is copied shard by
    /// shard as it does.
    private func checkpointSealed() {
        let due = shared.withLock { shared -> (StreamTable, UInt64, [IndexCheckpoint.Covered], Int)? in
            let estimate = shared.checkpointSize > 0 ? shared.checkpointSize : 64 + 48 * shared.streams.count
            guard shared.sealedFiles.count == shared.segments.count - 1, shared.size == 0,
                shared.sealed - shared.checkpointed >= 4 * estimate
            else { return nil }
            defer { shared.checkpointed = shared.sealed }
            return (shared.streams, shared.events, shared.sealedFiles, shared.checkpointed)
        }
        guard let (streams, events, covered, before) = due else { return }
        let (directory, shared, tracked) = (directory, shared, tracked)
        checkpointer.async {
            do {
                let size = try IndexCheckpoint.write(
                    streams: streams,
                    events: events,
                    segments: covered,
                    tracking: tracked,
                    in: directory
                )
                shared.withLock { $0.checkpointSize = size }
            } catch {
                // The older checkpoint stands; the next log file tries again.
                shared.withLock { $0.checkpointed = min($0.checkpointed, before) }
            }
        }
    }

    /// Starts the next log file. If that fails, the store goes on writing the current one.
    private func roll(after segment: Int) {
        // A sealed log file ends at its last commit: the zeros written ahead go first.
        let (old, size) = shared.withLock { ($0.segments[segment], $0.size) }
        guard io.truncate(old, to: size) == 0 else { return }
        let synced = io.sync(old)
        shared.withLock { shared in
            shared.allocated = size
            // A failed fdatasync leaves the file's contents unknown: the store stops writing.
            if synced != 0 {
                shared.broken = Self.broken(
                    by: EventStoreError(.io(code: -synced, operation: "sync \(Self.path(of: segment, in: directory))")),
                    in: directory
                )
            }
        }
        guard synced == 0 else { return }
        // The sealed file as index checkpoints describe it; if its end cannot be read, this store writes
        // no more checkpoints (they would not cover it).
        let sealedFile =
            (try? IndexCheckpoint.fingerprint(old, committed: size, path: Self.path(of: segment, in: directory)))
            .map { IndexCheckpoint.Covered(committed: size, fingerprint: $0) }
        let path = Self.path(of: segment + 1, in: directory)
        guard let descriptor = try? Files.openFile(path, create: true) else { return }
        guard (try? Files.syncDirectory(directory)) != nil else {
            Files.release(descriptor)
            _ = path.withCString { unlink($0) }
            return
        }
        // The manifest lists the new file before anything is written to it: deleting it is then loss.
        // If it cannot be written, the file is used all the same: its loss would then go unnoticed, as
        // without manifests, but taking it back could contradict a manifest that did reach the disk.
        writeManifest(clean: false, rolling: true)
        shared.withLock { shared in
            shared.segments.append(descriptor)
            shared.sealed += shared.size
            shared.size = 0
            shared.allocated = 0
            if let sealedFile, shared.sealedFiles.count == segment { shared.sealedFiles.append(sealedFile) }
        }
        checkpointSealed()
        scheduleCompaction()
    }

    // MARK: Compaction

    /// What a compaction did.
    public struct Compaction: Hashable, Sendable {
        /// The log files deleted.
        public var removedFiles = 0
        /// Their bytes.
        public var removedBytes = 0
        /// The streams whose kept records were copied to the end of the log.
        public var relocatedStreams = 0

        /// Nothing done.
        public init() {}
    }

    /// Compacts the log now, as the store does by itself whenever it seals a log file, and returns what
    /// was done: while the oldest log file (not the one being written) holds at most half its bytes in
    /// records the ``Options/retention`` keeps, the streams with records there that are kept copy them to
    /// the end of the log (relocation: a stream's kept events and snapshots, in one group commit with the
    /// appends of that moment, which it does not hold up otherwise), and the file is deleted once the
    /// manifest no longer lists it. Files go oldest first, so a mostly kept old file holds back those
    /// after it. With ``Retention/keepAll``, or on a store opened read-only, nothing is done.
    ///
    /// A crash at any step leaves a store that opens with every kept record: a relocation not yet
    /// committed is a torn tail, one committed makes the older copies unused, and a file the manifest no
    /// longer lists is deleted at the next open.
    ///
    /// - Throws: ``EventStoreError`` when a read or a relocation fails (a full disk, say): nothing is
    ///   lost, and the next pass starts again from the oldest file.
    public func compact() async throws -> Compaction {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Compaction, any Error>) in
            compactor.async {
                do throws(EventStoreError) {
                    continuation.resume(returning: try self.compactPass())
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Queues a compaction pass, unless retention keeps everything or one is queued already.
    private func scheduleCompaction() {
        guard options.retention.keptSnapshots > 0, !options.readOnly else { return }
        let start = shared.withLock { shared -> Bool in
            guard !shared.compacting, !shared.closed, shared.segments.count >= shared.compactionHeld else {
                return false
            }
            shared.compacting = true
            return true
        }
        guard start else { return }
        compactor.async {
            // A failed pass leaves everything in place; a few log files later, another tries again.
            let failed = (try? self.compactPass()) == nil
            self.shared.withLock { shared in
                shared.compacting = false
                if failed { shared.compactionHeld = shared.segments.count + 4 }
            }
        }
    }

    /// A record of a log file, as compaction sees it.
    private struct Found {
        let location: Location
        let size: Int
        let stream: String
        /// For events: the last version it holds (its first minus one if it holds none); `nil` for a
        /// snapshot.
        let last: UInt64?
    }

    /// Compaction, on the compactor queue: removes the oldest log files while at most half of what they
    /// hold is kept. It reads the sealed files from the oldest on, up to ``compactionWindow`` of them,
    /// until the part read is at most half kept (a mostly kept old file is then taken with the mostly
    /// removed ones after it), relocates what that part keeps, and deletes it file by file. See
    /// ``compact()``.
    private func compactPass() throws(EventStoreError) -> Compaction {
        var done = Compaction()
        let keep = options.retention.keptSnapshots
        guard keep > 0, !options.readOnly else { return done }
        while true {
            let sealed = shared.withLock { shared -> [(segment: Int, descriptor: Int32, size: Int)] in
                guard !shared.closed, shared.broken == nil else { return [] }
                let end = min(shared.segments.count - 1, shared.sealedFiles.count, shared.first + Self.compactionWindow)
                guard shared.first < end else { return [] }
                return (shared.first..<end).map { ($0, shared.segments[$0], shared.sealedFiles[$0].committed) }
            }
            var moves: [String: (events: Bool, snapshots: [Location])] = [:]
            var (kept, size) = (0, 0)
            var prefix = 0
            for file in sealed {
                let found = try records(of: file)
                let measured = keptRecords(found, keep: keep)
                kept += measured.bytes
                size += file.size
                for (stream, move) in measured.moves {
                    moves[stream, default: (false, [])].events = moves[stream]?.events == true || move.events
                    moves[stream, default: (false, [])].snapshots += move.snapshots
                }
                if kept * 2 <= size {
                    prefix = file.segment - (sealed.first?.segment ?? 0) + 1
                    break
                }
            }
            guard prefix > 0 else {
                // Nothing worth it within the window: the automatic passes wait for a few more files.
                shared.withLock { $0.compactionHeld = $0.segments.count + 4 }
                return done
            }
            try relocate(moves, keep: keep)
            done.relocatedStreams += moves.count
            for file in sealed.prefix(prefix) {
                // Appends since went after the copies; a record still kept now would be lost with the file.
                guard keptRecords(try records(of: file), keep: keep).moves.isEmpty else { return done }
                guard writer.sync(execute: { removeFront(file.segment, size: file.size) }) else { return done }
                done.removedFiles += 1
                done.removedBytes += file.size
            }
        }
    }

    /// The most log files one compaction step reads before it gives up finding a part at most half kept.
    static let compactionWindow = 16

    /// The committed records of a sealed log file, commits left out. Only compaction closes a log
    /// file's descriptor before the store closes: it stays open here.
    private func records(of file: (segment: Int, descriptor: Int32, size: Int)) throws(EventStoreError) -> [Found] {
        let path = Self.path(of: file.segment, in: directory)
        return try records(
            in: try Files.readBytes(file.descriptor, count: file.size, at: 0, path: path),
            segment: file.segment
        )
    }

    /// The committed records of a sealed log file (its `bytes`), commits left out.
    private func records(in bytes: [UInt8], segment: Int) throws(EventStoreError) -> [Found] {
        var found: [Found] = []
        var offset = 0
        while offset < bytes.count {
            let location = Location(segment: segment, offset: offset)
            guard case .record(let payload, let next) = RecordFrame.read(bytes, at: offset) else {
                throw corruption(at: location, "the record is incomplete or fails its checksum")
            }
            let record: LogRecord
            do {
                record = try LogRecord.decode(payload)
            } catch {
                throw corruption(at: location, error.reason)
            }
            switch record {
            case .events(let stream, let first, _, let payloads), .relocated(let stream, let first, _, let payloads):
                found.append(
                    Found(
                        location: location,
                        size: next - offset,
                        stream: stream,
                        last: first - 1 + UInt64(payloads.count)
                    )
                )
            case .snapshot(let snapshot):
                found.append(Found(location: location, size: next - offset, stream: snapshot.stream, last: nil))
            case .commit:
                break
            }
            offset = next
        }
        return found
    }

    /// The bytes of `found` that the stores keeps, and the streams that must be relocated for none of
    /// them to be needed: those with kept events there (or their last record, which the index points
    /// at), with whether their events move and which kept snapshots are there.
    private func keptRecords(
        _ found: [Found],
        keep: Int
    ) -> (bytes: Int, moves: [String: (events: Bool, snapshots: [Location])]) {
        var entries: [String: StreamEntry] = [:]
        shared.withLock { shared in
            for record in found where entries[record.stream] == nil {
                entries[record.stream] = shared.streams[record.stream] ?? StreamEntry()
            }
        }
        var bytes = 0
        var moves: [String: (events: Bool, snapshots: [Location])] = [:]
        for record in found {
            guard let entry = entries[record.stream] else { continue }
            if let last = record.last {
                // A record before the stream's chain start is an older copy; one up to the retained version
                // is past retention.
                let current = entry.chainStart == .none || record.location.packed >= entry.chainStart.packed
                if current && last > entry.retainedAfter(keep: keep) {
                    bytes += record.size
                    moves[record.stream, default: (false, [])].events = true
                } else if record.location == entry.tail {
                    moves[record.stream, default: (false, [])].events = true
                }
            } else if entry.snapshots.contains(where: { $0.location == record.location }) {
                bytes += record.size
                moves[record.stream, default: (false, [])].snapshots.append(record.location)
            }
        }
        return (bytes, moves)
    }

    /// Copies what each stream of `moves` keeps in the log files compacted (its events, when `events`,
    /// and the snapshots at those locations) to the end of the log, and waits until it is committed.
    private func relocate(
        _ moves: [String: (events: Bool, snapshots: [Location])],
        keep: Int
    ) throws(EventStoreError) {
        let group = DispatchGroup()
        let failure = Locked<EventStoreError?>(nil)
        for (stream, move) in moves {
            let relocation = try reading(stream) { (entry, segments) throws(EventStoreError) -> Relocation? in
                guard let entry else { return nil }
                let after = entry.retainedAfter(keep: keep)
                // From what the policy keeps, or what is left of it: a policy that keeps more than it
                // did when earlier files were removed (a larger N) cannot bring those back.
                let events =
                    move.events
                    ? try self.events(
                        of: stream,
                        entry: entry,
                        segments: segments,
                        after: after,
                        limit: Int(entry.version - after),
                        available: true
                    ) : nil
                var snapshots: [(snapshot: Snapshot, source: Location)] = []
                for location in move.snapshots {
                    snapshots.append((try snapshot(of: stream, at: location, segments: segments), location))
                }
                return Relocation(
                    stream: stream,
                    from: events?.first?.version ?? entry.version + 1,
                    version: entry.version,
                    events: events?.map(\.payload),
                    snapshots: snapshots
                )
            }
            guard let relocation else { continue }
            group.enter()
            submit(
                .relocate(relocation),
                .callback { result in
                    if case .failure(let error) = result { failure.withLock { $0 = $0 ?? error } }
                    group.leave()
                }
            )
        }
        group.wait()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// Deletes log file `segment` (the first kept, sealed, of `size` bytes), whose records the store
    /// keeps no longer: first the manifest stops listing it, then it goes, then a new index checkpoint is
    /// written (the old one covers the file). On the writer queue; returns whether it was deleted.
    private func removeFront(_ segment: Int, size: Int) -> Bool {
        let due = shared.withLock { shared -> Bool in
            guard !shared.closed, shared.broken == nil, shared.first == segment, segment < shared.segments.count - 1
            else { return false }
            shared.first = segment + 1
            shared.sealed -= size
            return true
        }
        guard due else { return false }
        guard writeManifest(clean: false) else {
            shared.withLock { shared in
                shared.first = segment
                shared.sealed += size
            }
            return false
        }
        _ = Self.path(of: segment, in: directory).withCString { unlink($0) }
        _ = try? Files.syncDirectory(directory)
        shared.withLock { shared in
            let descriptor = shared.segments[segment]
            shared.segments[segment] = -1
            // A read that took the descriptors before may still use this one.
            shared.retired.append((descriptor, shared.epoch))
            if shared.readers > 0 { shared.lingeringReads[shared.epoch] = shared.readers }
            shared.readers = 0
            shared.epoch += 1
            for unused in shared.releasable() { Files.release(unused) }
            if segment < shared.sealedFiles.count {
                shared.sealedFiles[segment] = IndexCheckpoint.Covered(committed: 0, fingerprint: 0)
            }
            shared.streams.forget(before: segment + 1)
        }
        checkpointAll()
        return true
    }

    /// Writes an index checkpoint of the whole log as it is now, in the background; on the writer queue.
    /// If it cannot be, the old checkpoint (which no longer fits) goes, so an open reads the whole log.
    private func checkpointAll() {
        let state = shared.withLock { shared in
            shared.sealedFiles.count == shared.segments.count - 1
                ? (shared.streams, shared.events, shared.sealedFiles, shared.segments.last ?? -1, shared.size) : nil
        }
        let directory = directory
        guard let (streams, events, sealed, last, size) = state,
            let fingerprint = try? IndexCheckpoint.fingerprint(
                last,
                committed: size,
                path: Self.path(of: sealed.count, in: directory)
            )
        else {
            IndexCheckpoint.remove(in: directory)
            return
        }
        let covered = sealed + [IndexCheckpoint.Covered(committed: size, fingerprint: fingerprint)]
        shared.withLock { $0.checkpointed = $0.sealed + size }
        let tracked = tracked
        checkpointer.async {
            do {
                try IndexCheckpoint.write(
                    streams: streams,
                    events: events,
                    segments: covered,
                    tracking: tracked,
                    in: directory
                )
            } catch {
                IndexCheckpoint.remove(in: directory)
            }
        }
    }

    // MARK: Reading

    /// How many bytes a record's first read asks for: its header and, for most events, all of it, so a
    /// record costs one `pread`, not one for its header and one for the rest.
    static let firstRead = 256

    private func readRecord(at location: Location, segments: [Int32]) throws(EventStoreError) -> LogRecord {
        guard location.segment < segments.count else { throw corruption(at: location, "no such log file") }
        let descriptor = segments[location.segment]
        var bytes = try Files.readBytes(
            descriptor,
            count: Self.firstRead,
            at: location.offset,
            path: Self.path(of: location.segment, in: directory)
        )
        guard bytes.count >= RecordFrame.headerSize else {
            throw corruption(at: location, "the file ends in a header")
        }
        let length = RecordFrame.declaredLength(bytes)
        guard length <= RecordFrame.maximumPayload else {
            throw corruption(at: location, "a length of \(length) bytes")
        }
        let total = RecordFrame.headerSize + length
        if bytes.count < total {
            bytes += try Files.readBytes(
                descriptor,
                count: total - bytes.count,
                at: location.offset + bytes.count,
                path: Self.path(of: location.segment, in: directory)
            )
        }
        guard case .record(let payload, _) = RecordFrame.read(bytes, at: 0) else {
            throw corruption(at: location, "the record is incomplete or fails its checksum")
        }
        do {
            return try LogRecord.decode(payload)
        } catch {
            throw corruption(at: location, error.reason)
        }
    }

    private func corruption(at location: Location, _ reason: String) -> EventStoreError {
        EventStoreError(
            .corrupted(
                location: "\(Self.path(of: location.segment, in: directory)) at offset \(location.offset)",
                reason: reason
            )
        )
    }

    // MARK: Opening

    static let lockName = "store.lock"

    static func path(of segment: Int, in directory: String) -> String {
        let digits = String(segment)
        return directory + "/segment-" + String(repeating: "0", count: max(0, 8 - digits.count)) + digits + ".log"
    }

    /// Locks the directory and its lock file, or says who holds them. The directory's own lock is the
    /// one that counts (it holds even if the lock file is deleted); the lock file names the holder.
    private static func lock(_ directory: String) throws(EventStoreError) -> (file: Int32, directory: Int32) {
        let path = directory + "/" + lockName
        let folder = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw Files.error("open \(directory)", code: errno) }
        let descriptor: Int32
        do {
            descriptor = try Files.openFile(path, create: true)
        } catch {
            Files.release(folder)
            throw error
        }
        for locked in [folder, descriptor] where flock(locked, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            let holder = (try? Files.readBytes(descriptor, count: 32, at: 0, path: path)).map {
                String(decoding: $0, as: UTF8.self).filter(\.isNumber)
            }
            Files.unlockAndRelease(descriptor)
            Files.unlockAndRelease(folder)
            guard code == EWOULDBLOCK else {
                throw Files.error("lock \(locked == folder ? directory : path)", code: code)
            }
            let who = holder.flatMap { $0.isEmpty ? nil : "process \($0)" } ?? "another process"
            throw EventStoreError(
                .unavailable(reason: "\(directory) is in use by \(who) (lock file \(path)); one store per directory")
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        return (descriptor, folder)
    }

    struct Opened {
        var streams = StreamTable()
        var segments: [Int32] = []
        var size = 0
        /// The last log file's length, when zeros written ahead follow its good part.
        var allocated = 0
        var opening = Opening(segments: 0, streams: 0, events: 0, truncated: nil)
        /// The sequence number of the manifest found (0 for none).
        var manifestSequence: UInt64 = 0
        /// The committed bytes of each log file.
        var sizes: [Int] = []
        /// Every log file but the last, as an index checkpoint describes them.
        var sealedFiles: [IndexCheckpoint.Covered] = []
        /// The bytes of log the index checkpoint used covered (0 for none).
        var checkpointed = 0
        /// The first log file kept (compaction removed those before it).
        var first = 0
        /// How many snapshots of a stream the index keeps track of.
        var keep = 1
    }

    /// ``readLog(directory:io:options:)`` for a read-only open, which may read a store another process
    /// is writing: a batch half copied into the file as it is read looks damaged, so damage is read
    /// again, twice, before it is taken for damage.
    private static func readLogReadOnly(
        directory: String,
        io: any StoreIO,
        options: Options
    ) throws(EventStoreError) -> Opened {
        var attempt = 1
        while true {
            do {
                return try readLog(directory: directory, io: io, options: options)
            } catch {
                // A log file removed by compaction as it was listed is missing, as it is opened.
                var again = false
                if case .corrupted = error.kind { again = true }
                if case .io(let code, _) = error.kind, code == ENOENT { again = true }
                guard again, attempt < 3 else { throw error }
                attempt += 1
            }
        }
    }

    /// Reads every log file in order, rebuilding the index; checks the log against the manifest (a log
    /// file missing or cut short is loss); then cuts a torn tail off the last file, unless read-only.
    private static func readLog(
        directory: String,
        io: any StoreIO,
        options: Options
    ) throws(EventStoreError) -> Opened {
        var opened = Opened()
        opened.keep = options.retention.trackedSnapshots
        do throws(EventStoreError) {
            let manifest: Manifest?
            do {
                manifest = try Manifest.read(in: directory)
            } catch {
                // A damaged manifest says nothing trustworthy: without `acceptLoss` the store is not
                // opened on a guess.
                guard options.acceptLoss, case .corrupted = error.kind else { throw error }
                manifest = nil
                opened.opening.lost = Loss(events: 0, reason: "\(error); the log was read without it")
            }
            opened.manifestSequence = manifest?.sequence ?? 0
            var numbers = try Files.names(in: directory).compactMap(segmentNumber).sorted()
            // Without a manifest (one deleted, or damaged and accepted as lost), a compacted store's log
            // starts at its lowest file; only with acceptLoss, as earlier files may be gone.
            let lowest = manifest == nil && options.acceptLoss ? numbers.first ?? 0 : 0
            let first = manifest?.first ?? lowest
            opened.first = first
            // Log files before the first kept one are left of a compaction that crashed before deleting
            // them: the manifest that dropped them was written, so nothing in them is needed.
            for number in numbers where number < first && !options.readOnly {
                _ = path(of: number, in: directory).withCString { unlink($0) }
            }
            numbers = numbers.filter { $0 >= first }
            for (index, number) in numbers.enumerated() where number != first + index {
                throw EventStoreError(
                    .corrupted(location: directory, reason: "\(path(of: first + index, in: directory)) is missing")
                )
            }
            var sizes: [Int] = Array(repeating: 0, count: first)
            opened.segments = Array(repeating: -1, count: first)
            for segment in numbers {
                let path = path(of: segment, in: directory)
                let descriptor = try Files.openFile(path, create: false, readOnly: options.readOnly)
                opened.segments.append(descriptor)
                sizes.append(try Files.fileSize(descriptor, path: path))
            }
            let checkpoint =
                options.indexCheckpoint ? usableCheckpoint(in: directory, sizes: sizes, opened: &opened) : nil
            if let checkpoint {
                opened.streams = checkpoint.streams
                opened.opening.events = checkpoint.events
                opened.checkpointed = checkpoint.segments.reduce(0) { $0 + $1.committed }
                opened.opening.checkpoint = .used(events: checkpoint.events, skippedBytes: opened.checkpointed)
            }
            var tail: (descriptor: Int32, path: String, good: Int, size: Int, ahead: Bool)?
            opened.sizes = Array(repeating: 0, count: first)
            opened.sealedFiles = Array(repeating: IndexCheckpoint.Covered(committed: 0, fingerprint: 0), count: first)
            let count = first + numbers.count
            for (segment, descriptor) in opened.segments.enumerated() where segment >= first {
                let path = path(of: segment, in: directory)
                // The part of the file the checkpoint covers is in the index already.
                let start = checkpoint.map { segment < $0.segments.count ? $0.segments[segment].committed : 0 } ?? 0
                let bytes = try Files.readBytes(descriptor, count: sizes[segment] - start, at: start, path: path)
                let good = try scan(
                    bytes,
                    from: start,
                    segment: segment,
                    path: path,
                    last: segment == count - 1,
                    into: &opened
                )
                // Zeros after the last commit were written ahead, not written as records.
                tail = (descriptor, path, good, start + bytes.count, bytes[(good - start)...].allSatisfy { $0 == 0 })
                opened.size = good
                opened.sizes.append(good)
                guard segment < count - 1 else { continue }
                // A sealed file as a later checkpoint will describe it: the checkpoint's word, where it
                // covered the whole file.
                if let checkpoint, segment < checkpoint.segments.count - 1 {
                    opened.sealedFiles.append(checkpoint.segments[segment])
                } else {
                    let fingerprint = try IndexCheckpoint.fingerprint(descriptor, committed: good, path: path)
                    opened.sealedFiles.append(IndexCheckpoint.Covered(committed: good, fingerprint: fingerprint))
                }
            }
            if let manifest, let loss = loss(against: manifest, segments: count, opened: opened, in: directory) {
                guard options.acceptLoss else {
                    throw EventStoreError(
                        .corrupted(
                            location: directory,
                            reason: "\(loss); open with acceptLoss (loop-demo: --accept-loss) to go on without them"
                        )
                    )
                }
                opened.opening.lost = loss
            }
            if let tail, tail.good < tail.size, tail.ahead {
                opened.allocated = tail.size
            } else if let tail, tail.good < tail.size {
                if !options.readOnly {
                    guard io.truncate(tail.descriptor, to: tail.good) == 0, io.sync(tail.descriptor) == 0 else {
                        throw Files.error("cut the unfinished write at offset \(tail.good) of \(tail.path)")
                    }
                }
                opened.opening.truncated = TruncatedTail(
                    file: tail.path,
                    offset: tail.good,
                    bytes: tail.size - tail.good
                )
            }
        } catch {
            for descriptor in opened.segments where descriptor >= 0 { Files.release(descriptor) }
            throw error
        }
        opened.opening.segments = opened.segments.count - opened.first
        opened.opening.streams = opened.streams.count
        return opened
    }

    /// The index checkpoint in `directory` if it fits the log files open in `opened` (of lengths
    /// `sizes`); otherwise `nil`, with the reason it was refused in `opened.opening.checkpoint`.
    private static func usableCheckpoint(
        in directory: String,
        sizes: [Int],
        opened: inout Opened
    ) -> IndexCheckpoint? {
        let checkpoint: IndexCheckpoint
        switch IndexCheckpoint.read(in: directory, limit: 2 * sizes.reduce(0, +) + (1 << 20)) {
        case .success(nil):
            return nil
        case .success(let found?):
            checkpoint = found
        case .failure(let problem):
            opened.opening.checkpoint = .refused(reason: problem.reason)
            return nil
        }
        func refuse(_ reason: String) -> IndexCheckpoint? {
            opened.opening.checkpoint = .refused(reason: reason)
            return nil
        }
        guard checkpoint.tracking >= opened.keep else {
            return refuse(
                "it keeps \(checkpoint.tracking) snapshots of a stream, and the retention needs \(opened.keep)"
            )
        }
        guard checkpoint.segments.count <= sizes.count else {
            return refuse("it covers \(checkpoint.segments.count) log files, and there are \(sizes.count)")
        }
        for (segment, covered) in checkpoint.segments.enumerated() {
            let path = path(of: segment, in: directory)
            // A covered file the store sealed since has grown to its end: only the last covered one.
            let grown = segment == checkpoint.segments.count - 1
            guard grown ? sizes[segment] >= covered.committed : sizes[segment] == covered.committed else {
                return refuse("\(path) is \(sizes[segment]) bytes long, not the \(covered.committed) it covers")
            }
            let fingerprint: UInt32
            do {
                fingerprint = try IndexCheckpoint.fingerprint(
                    opened.segments[segment],
                    committed: covered.committed,
                    path: path
                )
            } catch {
                return refuse("\(error)")
            }
            guard fingerprint == covered.fingerprint else {
                return refuse("\(path) does not hold the bytes it covers")
            }
        }
        return checkpoint
    }

    /// What the log lacks of what `manifest` recorded as committed, or `nil` if it holds all of it.
    private static func loss(
        against manifest: Manifest,
        segments: Int,
        opened: Opened,
        in directory: String
    ) -> Loss? {
        let gone = manifest.events > opened.opening.events ? manifest.events - opened.opening.events : 0
        if segments < manifest.segments {
            let first = path(of: segments, in: directory)
            let files =
                manifest.segments - segments == 1
                ? first : "\(first) and the \(manifest.segments - segments - 1) after it"
            return Loss(events: gone, reason: "\(files) \(manifest.segments - segments == 1 ? "is" : "are") missing")
        }
        if segments == manifest.segments, opened.size < manifest.committed {
            let last = path(of: segments - 1, in: directory)
            return Loss(
                events: gone,
                reason: "\(last) is committed up to offset \(opened.size), short of the \(manifest.committed) it had"
            )
        }
        // The files the manifest lists may have grown since (a crash after more writes), never shrunk.
        let listed = opened.sizes.prefix(manifest.segments).reduce(0, +)
        if listed < manifest.bytes {
            return Loss(
                events: gone,
                reason: "the log files hold \(listed) committed bytes, short of the \(manifest.bytes) they had"
            )
        }
        if gone > 0 {
            return Loss(events: gone, reason: "the log holds \(opened.opening.events) of \(manifest.events) events")
        }
        return nil
    }

    /// Indexes the records of one log file; returns the length of its good part: up to the end of its
    /// last group commit. Records after that commit were never acknowledged (their write was cut short),
    /// and are cut. Damage with a commit after it is corruption: something acknowledged would be lost.
    ///
    /// `bytes` are the file's from offset `base` on: what comes before is in the index already (an index
    /// checkpoint covers it) and ends with a commit.
    private static func scan(
        _ bytes: [UInt8],
        from base: Int,
        segment: Int,
        path: String,
        last: Bool,
        into opened: inout Opened
    ) throws(EventStoreError) -> Int {
        // Offsets into `bytes`; `base` more in the file.
        var offset = 0
        var committed = 0
        var pending: [(record: LogRecord, offset: Int)] = []
        func damaged(_ reason: String, at position: Int) -> EventStoreError {
            EventStoreError(.corrupted(location: "\(path) at offset \(base + position)", reason: reason))
        }
        /// The end of the good part, when what follows the last commit is an unfinished write.
        func unfinished(_ reason: String) throws(EventStoreError) -> Int {
            guard last else { throw damaged("\(reason), in a log file that is not the last", at: committed) }
            return base + committed
        }
        func commitFollows(_ offset: Int) -> Bool {
            Self.commitFollows(offset, in: bytes, committed: committed, base: base, last: last)
        }
        while true {
            switch RecordFrame.read(bytes, at: offset) {
            case .end:
                return pending.isEmpty ? base + offset : try unfinished("records with no commit after them")
            case .tornTail:
                // A record running past the end is an unfinished write only if nothing committed follows:
                // a damaged length must not hide the acknowledged records after it.
                if commitFollows(offset) {
                    throw damaged("a record longer than what follows it, with committed records after it", at: offset)
                }
                return try unfinished("an incomplete record")
            case .corrupted(_, let reason):
                if commitFollows(offset) {
                    throw damaged(reason, at: offset)
                }
                return try unfinished(reason)
            case .record(let payload, let next):
                let record: LogRecord
                do {
                    record = try LogRecord.decode(payload)
                } catch {
                    if commitFollows(offset) {
                        throw damaged(error.reason, at: offset)
                    }
                    return try unfinished(error.reason)
                }
                if case .commit(let start) = record {
                    guard start == UInt64(base + committed) else {
                        throw damaged(
                            "a commit of a batch from offset \(start), after \(base + committed)",
                            at: offset
                        )
                    }
                    var relocating: [String: UInt64] = [:]
                    for (record, position) in pending {
                        try apply(
                            record,
                            at: Location(segment: segment, offset: base + position),
                            into: &opened,
                            relocating: &relocating
                        ) {
                            damaged($0, at: position)
                        }
                    }
                    // A relocation copies all a stream keeps, in one batch: it ends where the stream was.
                    for (stream, version) in relocating
                    where version != .max && opened.streams[stream]?.version != version {
                        throw damaged(
                            "a relocation of '\(stream)' that does not reach its version \(version)",
                            at: offset
                        )
                    }
                    pending = []
                    committed = next
                } else {
                    pending.append((record, offset))
                }
                offset = next
            }
        }
    }

    /// Whether a commit record starts anywhere after `offset`: whether damage at `offset` is followed
    /// by acknowledged data (corruption) or is the end of an unfinished write.
    ///
    /// Damage inside the last batch of the last log file (its commit record, the file's last, names the
    /// batch's start, `committed`, and only zeros follow it) is a batch whose write was cut: the file is
    /// zero-filled ahead, so its pages can reach the disk in any order, the commit's before an earlier
    /// one, and nothing of that batch was acknowledged before all of them had. (Were the batch
    /// acknowledged and damaged since, the manifest of a clean close still names the loss.)
    ///
    /// `bytes` start at offset `base` of the file; `offset` and `committed` are offsets into them.
    private static func commitFollows(
        _ offset: Int,
        in bytes: [UInt8],
        committed: Int,
        base: Int,
        last: Bool
    ) -> Bool {
        var position = offset + 1
        while position + RecordFrame.headerSize < bytes.count {
            if bytes[position + RecordFrame.headerSize] == LogRecord.commitKind,
                case .record(let payload, let next) = RecordFrame.read(bytes, at: position),
                case .commit(let start)? = try? LogRecord.decode(payload)
            {
                let finalBatch =
                    last && start == UInt64(base + committed) && bytes[next...].allSatisfy { $0 == 0 }
                return !finalBatch
            }
            position += 1
        }
        return false
    }

    /// Adds a committed record to the index, or says why it does not fit the history. `relocating` holds
    /// the streams whose relocation the batch holds, with the version each must reach.
    ///
    /// `opening.events` stays the sum of the streams' versions: a relocation's records take a stream
    /// back and forward to where it was (so the sum wraps in between, and comes back).
    private static func apply(
        _ record: LogRecord,
        at location: Location,
        into opened: inout Opened,
        relocating: inout [String: UInt64],
        damaged: (String) -> EventStoreError
    ) throws(EventStoreError) {
        switch record {
        case .events(let stream, let first, let previous, let payloads):
            var entry = opened.streams[stream] ?? StreamEntry()
            let before = entry.version
            // Its records before this were in log files compaction removed (once none of them was kept).
            if entry.tail == .none, previous != .none, previous.segment < opened.first, first > entry.version {
                entry.version = first - 1
                entry.tail = previous
            }
            // Appends after a relocation in its batch: the relocation is complete.
            if let target = relocating[stream] {
                guard entry.version == target || target == .max else {
                    throw damaged("a relocation of '\(stream)' that does not reach its version \(target)")
                }
                relocating[stream] = nil
            }
            guard first == entry.version + 1, previous == entry.tail else {
                throw damaged("events of '\(stream)' from version \(first) follow version \(entry.version)")
            }
            entry.appended(first: first, count: payloads.count, at: location)
            opened.streams[stream] = entry
            opened.opening.events = opened.opening.events &- before &+ entry.version
        case .relocated(let stream, let first, let previous, let payloads):
            var entry = opened.streams[stream] ?? StreamEntry()
            let before = entry.version
            if previous == .none {
                // The copy of what the stream keeps: its chain starts again here. (Where compaction removed
                // the stream's records before it, nothing says which version it must reach.)
                let removed = entry.tail == .none && opened.first > 0
                guard first - 1 <= entry.version || removed, relocating[stream] == nil else {
                    throw damaged("a relocation of '\(stream)' from version \(first), at version \(entry.version)")
                }
                relocating[stream] = removed ? .max : entry.version
                var fresh = StreamEntry()
                fresh.snapshots = entry.snapshots
                fresh.version = first - 1
                fresh.chainStart = location
                entry = fresh
            } else {
                guard relocating[stream] != nil, first == entry.version + 1, previous == entry.tail else {
                    throw damaged("relocated events of '\(stream)' from version \(first) follow \(entry.version)")
                }
            }
            if payloads.isEmpty {
                entry.tail = location
            } else {
                entry.appended(first: first, count: payloads.count, at: location)
            }
            opened.streams[stream] = entry
            opened.opening.events = opened.opening.events &- before &+ entry.version
        case .snapshot(let snapshot):
            var entry = opened.streams[snapshot.stream] ?? StreamEntry()
            if snapshot.version > entry.version {
                // Only a stream whose earlier records compaction removed has a snapshot before its events.
                guard entry.tail == .none, opened.first > 0 else {
                    throw damaged(
                        "a snapshot of '\(snapshot.stream)' at version \(snapshot.version), past \(entry.version)"
                    )
                }
                opened.opening.events = opened.opening.events &- entry.version &+ snapshot.version
                entry.version = snapshot.version
            }
            entry.saved(snapshot.version, at: location, keep: opened.keep)
            opened.streams[snapshot.stream] = entry
        case .commit:
            break
        }
    }

    /// The number in a log file's name (`segment-00000003.log`), or `nil` for another file.
    static func segmentNumber(_ name: String) -> Int? {
        guard name.hasPrefix("segment-"), name.hasSuffix(".log") else { return nil }
        let digits = name.dropFirst(8).dropLast(4)
        guard digits.count == 8, digits.allSatisfy(\.isASCII) else { return nil }
        return Int(digits)
    }
}
