#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A saved copy of the file store's index as of a point in its log, so an open reads it and only the
/// log written after that point, instead of every log file.
///
/// ```
/// "ELIX" | format: UInt8 | snapshots kept per stream: UInt8 | events: UInt64 | streams: UInt64 | log files: UInt32
///        | per log file: committed: UInt64 | fingerprint: UInt32
///        | per stream: name length: UInt32 | name: UTF-8 | version: UInt64 | tail: UInt64 | flags: UInt8
///                      | (flags & 1) snapshots: UInt8 | count x (location: UInt64 | version: UInt64)
///                      | (flags & 2) checkpoints: UInt32 | count x (first: UInt64 | location: UInt64)
///                      | (flags & 4) chain start: UInt64
/// crc32 of all of the above: UInt32 | its length: UInt64
/// ```
///
/// The point it covers is each log file's committed length, with a **fingerprint** of the file there
/// (the CRC-32 of its last 4 KiB before that length). An open uses the checkpoint only if the file is
/// whole (its checksum and length), its entries fit the log it describes (every location inside a
/// covered file, versions summing to its event count), and every covered log file is still there with
/// that length (exactly, for every file but the last covered one) and that fingerprint. Anything
/// else (a file deleted, cut or replaced, a checkpoint of another store) falls back to reading the
/// whole log: never a wrong index.
///
/// It is written whole under another name, synced, and renamed over the old one, so a crash or a full
/// disk leaves the old checkpoint or the new one, never half of one; the old one stays valid (it
/// covers a shorter prefix of the same log).
struct IndexCheckpoint {
    /// A log file as the checkpoint saw it.
    struct Covered: Hashable {
        /// Its committed length.
        var committed: Int
        /// The CRC-32 of its last ``IndexCheckpoint/fingerprintBytes`` bytes before `committed`.
        var fingerprint: UInt32
    }

    var segments: [Covered]
    var events: UInt64
    var streams: StreamTable
    /// How many snapshots of each stream the index keeps track of (the latest, or more under a retention
    /// policy): an open needing more reads the whole log.
    var tracking: Int

    static let name = "store.index"
    static let fingerprintBytes = 4_096
    private static let magic: [UInt8] = Array("ELIX".utf8)
    /// 2 since retention: several snapshots a stream, and a chain's start.
    private static let format: UInt8 = 2
    /// The trailer: a CRC-32 and the length it covers.
    private static let trailerSize = 12

    static func path(in directory: String) -> String { directory + "/" + name }

    /// The fingerprint of the log file open as `descriptor` at its committed length `committed`.
    static func fingerprint(_ descriptor: Int32, committed: Int, path: String) throws(EventStoreError) -> UInt32 {
        // An empty file's (and a removed one's: compaction lists those as empty).
        guard committed > 0 else { return 0 }
        let start = max(0, committed - fingerprintBytes)
        let bytes = try Files.readBytes(descriptor, count: committed - start, at: start, path: path)
        guard bytes.count == committed - start else {
            throw EventStoreError(.corrupted(location: path, reason: "it is shorter than \(committed) bytes"))
        }
        return bytes.withUnsafeBytes { CRC32.checksum($0, continuing: 0) }
    }

    // MARK: Writing

    /// Writes a checkpoint of `streams` (holding `events` events) covering `segments` into `directory`,
    /// a megabyte at a time (memory does not grow with the index), and renames it into place; returns
    /// its size. On failure the old checkpoint stays and nothing else is left behind.
    @discardableResult
    static func write(
        streams: StreamTable,
        events: UInt64,
        segments: [Covered],
        tracking: Int,
        in directory: String
    ) throws(EventStoreError) -> Int {
        let path = path(in: directory)
        let temporary = path + ".new"
        let descriptor = temporary.withCString { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        guard descriptor >= 0 else { throw Files.error("open \(temporary)") }
        var output = Output(descriptor: descriptor, path: temporary)
        do throws(EventStoreError) {
            output.bytes += magic
            output.bytes.append(format)
            output.bytes.append(UInt8(min(tracking, 255)))
            output.put(events)
            output.put(UInt64(streams.count))
            output.put(UInt32(segments.count))
            for segment in segments {
                output.put(UInt64(segment.committed))
                output.put(segment.fingerprint)
            }
            try streams.forEveryStream { (stream: String, entry: StreamEntry) throws(EventStoreError) in
                let name = Array(stream.utf8)
                output.put(UInt32(name.count))
                output.bytes += name
                output.put(entry.version)
                output.put(entry.tail.packed)
                let flags: UInt8 =
                    (entry.snapshots.isEmpty ? 0 : 1) | (entry.checkpoints.isEmpty ? 0 : 2)
                    | (entry.chainStart == .none ? 0 : 4)
                output.bytes.append(flags)
                if !entry.snapshots.isEmpty {
                    output.bytes.append(UInt8(min(entry.snapshots.count, 255)))
                    for snapshot in entry.snapshots.suffix(255) {
                        output.put(snapshot.location.packed)
                        output.put(snapshot.version)
                    }
                }
                if !entry.checkpoints.isEmpty {
                    output.put(UInt32(entry.checkpoints.count))
                    for checkpoint in entry.checkpoints {
                        output.put(checkpoint.first)
                        output.put(checkpoint.location.packed)
                    }
                }
                if entry.chainStart != .none { output.put(entry.chainStart.packed) }
                if output.bytes.count >= Output.chunk { try output.flush() }
            }
            try output.finish()
            guard fdatasync(descriptor) == 0 else { throw Files.error("sync \(temporary)") }
            Files.release(descriptor)
            output.descriptor = -1
            guard rename(temporary, path) == 0 else { throw Files.error("rename \(temporary) to \(path)") }
            try Files.syncDirectory(directory)
        } catch {
            if output.descriptor >= 0 { Files.release(descriptor) }
            _ = temporary.withCString { unlink($0) }
            throw error
        }
        return output.written
    }

    /// Removes the checkpoint in `directory`, if any, and makes that durable: a checkpoint that may no
    /// longer fit the log must not come back after a crash.
    static func remove(in directory: String) {
        guard path(in: directory).withCString({ unlink($0) }) == 0 else { return }
        _ = try? Files.syncDirectory(directory)
    }

    /// The bytes of a checkpoint on their way to its file, written a chunk at a time, and the checksum of
    /// those written.
    private struct Output {
        static let chunk = 1 << 20

        var descriptor: Int32
        let path: String
        var bytes: [UInt8] = []
        var written = 0
        var checksum: UInt32 = 0

        init(descriptor: Int32, path: String) {
            self.descriptor = descriptor
            self.path = path
            bytes.reserveCapacity(Self.chunk + 4_096)
        }

        mutating func put(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        mutating func put(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }

        /// Writes what is buffered.
        mutating func flush() throws(EventStoreError) {
            checksum = bytes.withUnsafeBytes { CRC32.checksum($0, continuing: checksum) }
            try writeBuffered()
        }

        /// Adds the trailer and writes the rest.
        mutating func finish() throws(EventStoreError) {
            checksum = bytes.withUnsafeBytes { CRC32.checksum($0, continuing: checksum) }
            let length = UInt64(written + bytes.count)
            put(checksum)
            put(length)
            try writeBuffered()
        }

        private mutating func writeBuffered() throws(EventStoreError) {
            var done = 0
            var failure: Int32 = 0
            bytes.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return }
                while done < buffer.count {
                    let count = pwrite(descriptor, base + done, buffer.count - done, off_t(written + done))
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0 else {
                        failure = count == 0 ? EIO : errno
                        return
                    }
                    done += count
                }
            }
            if failure != 0 { throw Files.error("write \(path)", code: failure) }
            written += done
            bytes.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Reading

    /// The checkpoint in `directory`: `nil` if there is none, or why the one there cannot be used. One
    /// larger than `limit` bytes is refused unread (an index is never larger than twice its log).
    static func read(in directory: String, limit: Int) -> Result<IndexCheckpoint?, CheckpointProblem> {
        let path = path(in: directory)
        let descriptor = path.withCString { open($0, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else {
            if errno == ENOENT { return .success(nil) }
            return .failure(CheckpointProblem("it cannot be opened: \(Files.error("open \(path)"))"))
        }
        defer { Files.release(descriptor) }
        let bytes: [UInt8]
        do {
            let size = try Files.fileSize(descriptor, path: path)
            guard size <= limit else {
                return .failure(CheckpointProblem("it is \(size) bytes long, more than its log could need"))
            }
            bytes = try Files.readBytes(descriptor, count: size, at: 0, path: path)
        } catch {
            return .failure(CheckpointProblem("it cannot be read: \(error)"))
        }
        do throws(CheckpointProblem) {
            return .success(try decode(bytes))
        } catch {
            return .failure(error)
        }
    }

    /// The checkpoint `bytes` hold, checked whole and for consistency.
    static func decode(_ bytes: [UInt8]) throws(CheckpointProblem) -> IndexCheckpoint {
        guard bytes.count >= magic.count + 1 + trailerSize else { throw CheckpointProblem("it is too short") }
        let body = bytes.count - trailerSize
        var cursor = Cursor(bytes: bytes, end: bytes.count)
        cursor.at = body
        let checksum = try cursor.word32()
        let length = try cursor.word64()
        guard length == UInt64(body) else { throw CheckpointProblem("it is incomplete") }
        let actual = bytes.withUnsafeBytes {
            CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[..<body]), continuing: 0)
        }
        guard actual == checksum else { throw CheckpointProblem("it fails its checksum") }
        cursor = Cursor(bytes: bytes, end: body)
        guard try cursor.take(magic.count) == magic[...] else {
            throw CheckpointProblem("it is not an index checkpoint")
        }
        let version = try cursor.byte()
        guard version == format else { throw CheckpointProblem("it has format \(version), not \(format)") }
        let tracking = Int(try cursor.byte())
        let events = try cursor.word64()
        let count = try cursor.word64()
        let segmentCount = try cursor.word32()
        guard segmentCount < 1 << 24 else { throw CheckpointProblem("it lists \(segmentCount) log files") }
        var segments: [Covered] = []
        for _ in 0..<segmentCount {
            let committed = try cursor.word64()
            guard committed < 1 << 40 else { throw CheckpointProblem("a committed length of \(committed)") }
            segments.append(Covered(committed: Int(committed), fingerprint: try cursor.word32()))
        }
        /// Whether `location` is the start of a record inside the covered log.
        func inside(_ location: Location) -> Bool {
            location.segment < segments.count && location.offset < segments[location.segment].committed
        }
        var streams = StreamTable()
        // Each entry takes at least 21 bytes (its name's length, version, tail and flags), so a damaged
        // count cannot make room for more streams than the bytes can hold.
        streams.reserve(Int(min(count, UInt64(body / 21))))
        var total: UInt64 = 0
        var read: UInt64 = 0
        while cursor.at < body {
            let nameLength = Int(try cursor.word32())
            let name = String(decoding: try cursor.take(nameLength), as: UTF8.self)
            var entry = StreamEntry()
            entry.version = try cursor.word64()
            // No store holds 2^62 events in a stream: such a version is damage, and would overflow.
            guard entry.version < 1 << 62 else { throw CheckpointProblem("stream '\(name)' is at \(entry.version)") }
            entry.tail = Location(packed: try cursor.word64())
            let flags = try cursor.byte()
            guard flags & ~7 == 0 else { throw CheckpointProblem("stream '\(name)' has flags \(flags)") }
            if flags & 1 != 0 {
                let count = try cursor.byte()
                for _ in 0..<count {
                    let location = Location(packed: try cursor.word64())
                    let version = try cursor.word64()
                    guard inside(location), version <= entry.version,
                        version > entry.snapshots.last?.version ?? 0
                            || entry.snapshots.isEmpty
                    else {
                        throw CheckpointProblem("a snapshot of '\(name)' is not in the log it covers")
                    }
                    entry.snapshots.append(StreamEntry.SnapshotRef(location: location, version: version))
                }
            }
            if flags & 2 != 0 {
                let checkpoints = try cursor.word32()
                guard UInt64(checkpoints) * 16 <= UInt64(body - cursor.at) else {
                    throw CheckpointProblem("stream '\(name)' lists \(checkpoints) checkpoints")
                }
                for _ in 0..<checkpoints {
                    let first = try cursor.word64()
                    let location = Location(packed: try cursor.word64())
                    guard inside(location), first <= entry.version, first > entry.checkpoints.last?.first ?? 0 else {
                        throw CheckpointProblem("a checkpoint of '\(name)' is not in the log it covers")
                    }
                    entry.checkpoints.append(StreamEntry.Checkpoint(first: first, location: location))
                }
            }
            if flags & 4 != 0 {
                entry.chainStart = Location(packed: try cursor.word64())
                guard inside(entry.chainStart) else {
                    throw CheckpointProblem("the chain of '\(name)' does not start in the log it covers")
                }
            }
            guard entry.tail == .none ? entry.version == 0 : entry.version > 0 && inside(entry.tail) else {
                throw CheckpointProblem("the last record of '\(name)' is not in the log it covers")
            }
            let before = streams.count
            streams[name] = entry
            guard streams.count > before else { throw CheckpointProblem("stream '\(name)' is listed twice") }
            let (sum, overflow) = total.addingReportingOverflow(entry.version)
            guard !overflow else { throw CheckpointProblem("its versions overflow") }
            total = sum
            read += 1
        }
        guard read == count, total == events, events < 1 << 62 else {
            throw CheckpointProblem(
                "it holds \(read) streams of \(total) events, not the \(count) of \(events) it says"
            )
        }
        return IndexCheckpoint(segments: segments, events: events, streams: streams, tracking: tracking)
    }

    /// Reads a checkpoint's bytes, every read checked against the end.
    private struct Cursor {
        let bytes: [UInt8]
        let end: Int
        var at = 0

        mutating func take(_ count: Int) throws(CheckpointProblem) -> ArraySlice<UInt8> {
            guard count >= 0, count <= end - at else { throw CheckpointProblem("it ends early") }
            defer { at += count }
            return bytes[at..<at + count]
        }

        mutating func byte() throws(CheckpointProblem) -> UInt8 { try take(1).first ?? 0 }

        mutating func word32() throws(CheckpointProblem) -> UInt32 { UInt32(littleEndian: try load(UInt32.self)) }

        mutating func word64() throws(CheckpointProblem) -> UInt64 { UInt64(littleEndian: try load(UInt64.self)) }

        private mutating func load<Word: FixedWidthInteger>(_: Word.Type) throws(CheckpointProblem) -> Word {
            let size = MemoryLayout<Word>.size
            guard size <= end - at else { throw CheckpointProblem("it ends early") }
            defer { at += size }
            return bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: Word.self) }
        }
    }
}

/// Why an index checkpoint cannot be used.
struct CheckpointProblem: Error {
    let reason: String

    init(_ reason: String) { self.reason = reason }
}
