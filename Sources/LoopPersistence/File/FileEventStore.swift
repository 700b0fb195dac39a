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
/// - **Recovery on open**: a torn tail (a write the process did not finish) is truncated and reported
///   in ``recovery``; damage before the tail is an error naming the file and offset. Nothing is skipped.
/// - **Failed writes**: when a write or `fdatasync` fails (ENOSPC, EIO), the log is cut back to its last
///   good record and the append fails; nothing acknowledged is lost. After a failed `fdatasync` the
///   store refuses further writes (the kernel may have dropped the data) until it is opened again.
///
/// - **Index checkpoint**: the index is saved when the store closes and when it seals a log file, and an
///   open reads it and only the log written after it; one that does not fit the log (damaged, or the
///   log changed under it) is refused and the whole log read (``Recovery/checkpoint``).
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
        /// since the store last wrote its manifest); what is gone is in ``Recovery/lost``. Without it,
        /// such a store does not open.
        public var acceptLoss: Bool
        /// Open from the index checkpoint (`store.index`) when it fits the log: read it and only the log
        /// written after it, not every log file. `false` reads the whole log, checking every record's
        /// checksum as it goes (what `loop-demo replay --store` does); a checkpoint that does not fit is
        /// never used either way. See ``Recovery/checkpoint``.
        public var indexCheckpoint: Bool

        /// Options with the defaults: 64 MiB log files, read and write, no loss accepted, opening from the
        /// index checkpoint.
        public init(
            segmentBytes: Int = 64 * 1_024 * 1_024,
            readOnly: Bool = false,
            acceptLoss: Bool = false,
            indexCheckpoint: Bool = true
        ) {
            self.segmentBytes = segmentBytes
            self.readOnly = readOnly
            self.acceptLoss = acceptLoss
            self.indexCheckpoint = indexCheckpoint
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
    public struct Recovery: Hashable, Sendable {
        /// The log files read.
        public var segments: Int
        /// The streams found.
        public var streams: Int
        /// The events found, over every stream.
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
        shared.withLock { $0.queued.count }
    }

    /// What opening the store found: the files read, the streams and events, and a torn tail it cut.
    public let recovery: Recovery

    /// The directory.
    public let directory: String

    private let options: Options
    private let io: any StoreIO
    private let writer = DispatchQueue(label: "FileEventStore.writer")
    /// Writes index checkpoints, one at a time, beside the writer.
    private let checkpointer = DispatchQueue(label: "FileEventStore.checkpointer", qos: .utility)
    private let shared: Locked<Shared>
    private let lockDescriptor: Int32
    /// The directory itself, locked too: a lock file can be deleted (and a new one made and locked by
    /// another process) while this store runs; the directory cannot be, while it holds the log.
    private let directoryDescriptor: Int32

    /// Opens (or creates) the store in `directory`, recovering what is there.
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
        self.io = io
        if options.readOnly {
            (lockDescriptor, directoryDescriptor) = (-1, -1)
            let opened = try Self.recoverReading(directory: directory, io: io, options: options)
            recovery = opened.recovery
            shared = Locked(Shared(opened))
            return
        }
        try Files.makeDirectory(directory)
        (lockDescriptor, directoryDescriptor) = try Self.lock(directory)
        var descriptors: [Int32] = []
        do throws(EventStoreError) {
            var opened = try Self.recover(directory: directory, io: io, options: options)
            descriptors = opened.segments
            if opened.segments.isEmpty {
                let descriptor = try Files.openFile(Self.path(of: 0, in: directory), create: true)
                opened.segments.append(descriptor)
                descriptors = opened.segments
                opened.size = 0
                opened.recovery.segments = 1
                try Files.syncDirectory(directory)
            }
            recovery = opened.recovery
            shared = Locked(Shared(opened))
        } catch {
            for descriptor in descriptors { Files.release(descriptor) }
            Files.release(lockDescriptor)
            Files.release(directoryDescriptor)
            throw error
        }
        // What is there now is what the store stands by: a later open finds less only by loss.
        writeManifest(clean: false)
        // A checkpoint this open did not use (refused, or not asked for) may stop fitting the log as this
        // store writes (a cut below what it covers, then the same lengths written again): it goes.
        if case .used = recovery.checkpoint {} else { IndexCheckpoint.remove(in: directory) }
    }

    deinit {
        shared.withLock { shared in
            for descriptor in shared.segments { Files.release(descriptor) }
            shared.segments = []
        }
        if lockDescriptor >= 0 { Files.release(lockDescriptor) }
        if directoryDescriptor >= 0 { Files.release(directoryDescriptor) }
    }

    /// Closes the store: waits for the write under way, fails appends still queued, records in its
    /// manifest how far the log is committed (so a later open finds any loss), and releases the
    /// directory to the next process. Every later call fails with `unavailable`.
    public func close() async {
        let queued = shared.withLock { shared -> [Queued]? in
            // A second close has nothing to do: the first released the directory.
            guard !shared.closed else { return nil }
            shared.closed = true
            defer { shared.queued = [] }
            return shared.queued
        }
        guard let queued else { return }
        for operation in queued { operation.finish(.failure(Self.closedError)) }
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
        if let settled = try settledAppend(payloads, to: stream, expecting: expectedVersion).get() {
            return settled
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
        switch settledAppend(payloads, to: stream, expecting: expectedVersion) {
        case .success(let settled?): completion(.success(settled))
        case .failure(let error): completion(.failure(error))
        case .success(nil):
            submit(.append(stream: stream, payloads: payloads, expected: expectedVersion), .callback(completion))
        }
    }

    /// The outcome of an append decided without the writer (an empty batch, one too large), or `nil`.
    private func settledAppend(
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
        let (entry, segments) = try view(of: stream)
        guard let entry, version < entry.version, limit > 0 else { return [] }
        let last = version + min(UInt64(limit), entry.version - version)
        var batches: [(first: UInt64, payloads: [[UInt8]])] = []
        var location = entry.start(for: last)
        var reached = false
        while location != .none {
            let record = try readRecord(at: location, segments: segments)
            guard case .events(let found, let first, let previous, let payloads) = record, found == stream else {
                throw corruption(at: location, "the record is not an events record of '\(stream)'")
            }
            if first <= last { batches.append((first, payloads)) }
            if first <= version + 1 {
                reached = true
                break
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
        let (entry, segments) = try view(of: stream)
        guard let entry, entry.snapshot != .none else { return nil }
        guard case .snapshot(let snapshot) = try readRecord(at: entry.snapshot, segments: segments),
            snapshot.stream == stream
        else { throw corruption(at: entry.snapshot, "the record is not a snapshot of '\(stream)'") }
        return snapshot
    }

    // MARK: Shared state

    /// A write waiting for the writer.
    enum Operation {
        case append(stream: String, payloads: [[UInt8]], expected: UInt64)
        case save(Snapshot)

        var stream: String {
            switch self {
            case .append(let stream, _, _): stream
            case .save(let snapshot): snapshot.stream
            }
        }
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
        var queued: [Queued] = []
        var flushing = false
        var closed = false
        /// Set when the log can no longer be trusted (a failed `fdatasync`, a failed rollback).
        var broken: EventStoreError?
        var statistics = Statistics()

        /// The state of a store just opened on what `opened` found.
        init(_ opened: Opened) {
            streams = opened.streams
            segments = opened.segments
            size = opened.size
            allocated = max(opened.allocated, opened.size)
            events = opened.recovery.events
            manifestSequence = opened.manifestSequence
            sealed = opened.sizes.dropLast().reduce(0, +)
            sealedFiles = opened.sealedFiles
            checkpointed = opened.checkpointed
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
            shared.queued.append(queued)
            defer { shared.flushing = true }
            return (!shared.flushing, nil)
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
                if let broken = shared.broken, !shared.queued.isEmpty {
                    // What was queued behind the write that broke the store fails now, not at close.
                    stranded = (shared.queued, broken)
                    shared.queued = []
                }
                guard !shared.queued.isEmpty, !shared.closed, shared.broken == nil else {
                    shared.flushing = false
                    return nil
                }
                defer { shared.queued = [] }
                var streams: [String: StreamEntry] = [:]
                for queued in shared.queued {
                    streams[queued.operation.stream] = shared.streams[queued.operation.stream]
                }
                return Batch(
                    queued: shared.queued,
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
        for queued in batch.queued { batch.results.append(encode(queued.operation, into: &batch)) }
        if !batch.bytes.isEmpty {
            batch.bytes += RecordFrame.encode(LogRecord.commit(start: UInt64(batch.size)).encode())
        }
        if !batch.bytes.isEmpty, let failure = write(&batch) {
            let cause = failure.error
            shared.withLock { shared in
                if failure.breaks { shared.broken = Self.broken(by: cause, in: directory) }
            }
            for (queued, result) in zip(batch.queued, batch.results) {
                // A refusal (a version conflict, say) stands; what would have been written fails.
                if case .failure(let refusal) = result {
                    queued.finish(.failure(refusal))
                } else {
                    queued.finish(.failure(EventStoreError(cause.kind, stream: queued.operation.stream)))
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
        for (queued, result) in zip(batch.queued, batch.results) { queued.finish(result) }
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
            batch.bytes += RecordFrame.encode(record.encode())
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
            batch.bytes += RecordFrame.encode(LogRecord.snapshot(snapshot).encode())
            batch.records += 1
            entry.snapshot = location
            entry.snapshotVersion = snapshot.version
        }
        batch.streams[stream] = entry
        return .success(entry.version)
    }

    /// Writes and syncs the batch's bytes after the last good record (with zeros written ahead when it
    /// reaches the end of those written before); on failure cuts the file back to that record and says
    /// whether the store can still be trusted.
    private func write(_ batch: inout Batch) -> (error: EventStoreError, breaks: Bool)? {
        let path = Self.path(of: batch.segment, in: directory)
        var done = 0
        var failure: (code: Int32, action: String)?
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
        let error = EventStoreError(.io(code: failure.code, action: failure.action))
        // Cut back to the last good record, so no half record stays before the next good one.
        var cut = io.truncate(batch.descriptor, to: batch.size)
        if cut == 0 { cut = io.sync(batch.descriptor) }
        shared.withLock { $0.allocated = batch.size }
        // After a failed fdatasync the kernel may have dropped the written pages: what the file holds is
        // unknown, so the store stops writing until it is opened (and its log read) again.
        return (error, cut != 0 || failure.action.hasPrefix("sync"))
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
            _ = try? IndexCheckpoint.write(streams: streams, events: events, segments: covered, in: directory)
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
        let (directory, shared) = (directory, shared)
        checkpointer.async {
            do {
                let size = try IndexCheckpoint.write(streams: streams, events: events, segments: covered, in: directory)
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
                    by: EventStoreError(.io(code: -synced, action: "sync \(Self.path(of: segment, in: directory))")),
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
    }

    // MARK: Reading

    private func readRecord(at location: Location, segments: [Int32]) throws(EventStoreError) -> LogRecord {
        guard location.segment < segments.count else { throw corruption(at: location, "no such log file") }
        let descriptor = segments[location.segment]
        let path = Self.path(of: location.segment, in: directory)
        let header = try Files.readBytes(descriptor, count: RecordFrame.headerSize, at: location.offset, path: path)
        guard header.count == RecordFrame.headerSize else {
            throw corruption(at: location, "the file ends in a header")
        }
        let length = RecordFrame.declaredLength(header)
        guard length <= RecordFrame.maximumPayload else {
            throw corruption(at: location, "a length of \(length) bytes")
        }
        let rest = try Files.readBytes(
            descriptor,
            count: length,
            at: location.offset + RecordFrame.headerSize,
            path: path
        )
        guard case .record(let payload, _) = RecordFrame.read(header + rest, at: 0) else {
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
            Files.release(descriptor)
            Files.release(folder)
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
        var recovery = Recovery(segments: 0, streams: 0, events: 0, truncated: nil)
        /// The sequence number of the manifest found (0 for none).
        var manifestSequence: UInt64 = 0
        /// The committed bytes of each log file.
        var sizes: [Int] = []
        /// Every log file but the last, as an index checkpoint describes them.
        var sealedFiles: [IndexCheckpoint.Covered] = []
        /// The bytes of log the index checkpoint used covered (0 for none).
        var checkpointed = 0
    }

    /// ``recover(directory:io:options:)`` for a read-only open, which may read a store another process
    /// is writing: a batch half copied into the file as it is read looks damaged, so damage is read
    /// again, twice, before it is taken for damage.
    private static func recoverReading(
        directory: String,
        io: any StoreIO,
        options: Options
    ) throws(EventStoreError) -> Opened {
        var attempt = 1
        while true {
            do {
                return try recover(directory: directory, io: io, options: options)
            } catch {
                guard case .corrupted = error.kind, attempt < 3 else { throw error }
                attempt += 1
            }
        }
    }

    /// Reads every log file in order, rebuilding the index; checks the log against the manifest (a log
    /// file missing or cut short is loss); then cuts a torn tail off the last file, unless read-only.
    private static func recover(
        directory: String,
        io: any StoreIO,
        options: Options
    ) throws(EventStoreError) -> Opened {
        var opened = Opened()
        do throws(EventStoreError) {
            let manifest: Manifest?
            do {
                manifest = try Manifest.read(in: directory)
            } catch {
                // A damaged manifest says nothing trustworthy: without `acceptLoss` the store is not
                // opened on a guess.
                guard options.acceptLoss, case .corrupted = error.kind else { throw error }
                manifest = nil
                opened.recovery.lost = Loss(events: 0, reason: "\(error); the log was read without it")
            }
            opened.manifestSequence = manifest?.sequence ?? 0
            let numbers = try Files.names(in: directory).compactMap(segmentNumber).sorted()
            for (expected, number) in numbers.enumerated() where number != expected {
                throw EventStoreError(
                    .corrupted(location: directory, reason: "\(path(of: expected, in: directory)) is missing")
                )
            }
            var sizes: [Int] = []
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
                opened.recovery.events = checkpoint.events
                opened.checkpointed = checkpoint.segments.reduce(0) { $0 + $1.committed }
                opened.recovery.checkpoint = .used(events: checkpoint.events, skippedBytes: opened.checkpointed)
            }
            var tail: (descriptor: Int32, path: String, good: Int, size: Int, ahead: Bool)?
            for (segment, descriptor) in opened.segments.enumerated() {
                let path = path(of: segment, in: directory)
                // The part of the file the checkpoint covers is in the index already.
                let start = checkpoint.map { segment < $0.segments.count ? $0.segments[segment].committed : 0 } ?? 0
                let bytes = try Files.readBytes(descriptor, count: sizes[segment] - start, at: start, path: path)
                let good = try scan(
                    bytes,
                    from: start,
                    segment: segment,
                    path: path,
                    last: segment == numbers.count - 1,
                    into: &opened
                )
                // Zeros after the last commit were written ahead, not written as records.
                tail = (descriptor, path, good, start + bytes.count, bytes[(good - start)...].allSatisfy { $0 == 0 })
                opened.size = good
                opened.sizes.append(good)
                guard segment < numbers.count - 1 else { continue }
                // A sealed file as a later checkpoint will describe it: the checkpoint's word, where it
                // covered the whole file.
                if let checkpoint, segment < checkpoint.segments.count - 1 {
                    opened.sealedFiles.append(checkpoint.segments[segment])
                } else {
                    let fingerprint = try IndexCheckpoint.fingerprint(descriptor, committed: good, path: path)
                    opened.sealedFiles.append(IndexCheckpoint.Covered(committed: good, fingerprint: fingerprint))
                }
            }
            if let manifest, let loss = loss(against: manifest, segments: numbers.count, opened: opened, in: directory)
            {
                guard options.acceptLoss else {
                    throw EventStoreError(
                        .corrupted(
                            location: directory,
                            reason: "\(loss); open with acceptLoss (loop-demo: --accept-loss) to go on without them"
                        )
                    )
                }
                opened.recovery.lost = loss
            }
            if let tail, tail.good < tail.size, tail.ahead {
                opened.allocated = tail.size
            } else if let tail, tail.good < tail.size {
                if !options.readOnly {
                    guard io.truncate(tail.descriptor, to: tail.good) == 0, io.sync(tail.descriptor) == 0 else {
                        throw Files.error("cut the unfinished write at offset \(tail.good) of \(tail.path)")
                    }
                }
                opened.recovery.truncated = TruncatedTail(
                    file: tail.path,
                    offset: tail.good,
                    bytes: tail.size - tail.good
                )
            }
        } catch {
            for descriptor in opened.segments { Files.release(descriptor) }
            throw error
        }
        opened.recovery.segments = opened.segments.count
        opened.recovery.streams = opened.streams.count
        return opened
    }

    /// The index checkpoint in `directory` if it fits the log files open in `opened` (of lengths
    /// `sizes`); otherwise `nil`, with the reason it was refused in `opened.recovery.checkpoint`.
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
            opened.recovery.checkpoint = .refused(reason: problem.reason)
            return nil
        }
        func refuse(_ reason: String) -> IndexCheckpoint? {
            opened.recovery.checkpoint = .refused(reason: reason)
            return nil
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
        let gone = manifest.events > opened.recovery.events ? manifest.events - opened.recovery.events : 0
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
            return Loss(events: gone, reason: "the log holds \(opened.recovery.events) of \(manifest.events) events")
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
                    for (record, position) in pending {
                        try apply(record, at: Location(segment: segment, offset: base + position), into: &opened) {
                            damaged($0, at: position)
                        }
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

    /// Adds a committed record to the index, or says why it does not fit the history.
    private static func apply(
        _ record: LogRecord,
        at location: Location,
        into opened: inout Opened,
        damaged: (String) -> EventStoreError
    ) throws(EventStoreError) {
        switch record {
        case .events(let stream, let first, let previous, let payloads):
            var entry = opened.streams[stream] ?? StreamEntry()
            guard first == entry.version + 1, previous == entry.tail else {
                throw damaged("events of '\(stream)' from version \(first) follow version \(entry.version)")
            }
            entry.appended(first: first, count: payloads.count, at: location)
            opened.streams[stream] = entry
            opened.recovery.events += UInt64(payloads.count)
        case .snapshot(let snapshot):
            var entry = opened.streams[snapshot.stream] ?? StreamEntry()
            guard snapshot.version <= entry.version else {
                throw damaged(
                    "a snapshot of '\(snapshot.stream)' at version \(snapshot.version), past \(entry.version)"
                )
            }
            if entry.snapshot == .none || snapshot.version >= entry.snapshotVersion {
                entry.snapshot = location
                entry.snapshotVersion = snapshot.version
            }
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
