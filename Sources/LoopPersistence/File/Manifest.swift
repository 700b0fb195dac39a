#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// What the file store knew it had acknowledged when it last said so: how many log files, how far the
/// last one was committed, and how many events they hold. Written when the store opens, when it starts a
/// new log file and when it closes, so a log file deleted or cut short afterwards is found as loss, not
/// taken for a torn tail.
///
/// The file holds two slots, written in turn in place (so a full disk never stops it, and a write torn
/// by a crash spoils only the slot it was writing): the valid slot with the higher sequence number
/// counts. After a crash the manifest is older than the log: the batches written since are checked only
/// by their frames and commit records.
struct Manifest: Hashable {
    /// The log files, `segment-00000000.log` onwards: one more than the last one's number.
    var segments: Int
    /// The first log file kept: those before it were removed by compaction.
    var first = 0
    /// The committed length of the last of them.
    var committed: Int
    /// The committed length of all of them together.
    var bytes: Int
    /// The events in all of them.
    var events: UInt64
    /// Whether the store closed after writing it (then it describes the whole log). Recorded for those
    /// who read the file; opening does not depend on it.
    var clean: Bool
    /// Which write this is: each is one more than the last.
    var sequence: UInt64

    static let name = "store.manifest"
    private static let magic: [UInt8] = Array("ELMF".utf8)
    /// 2 since compaction (the first log file kept); 1 is read as first 0.
    private static let version: UInt8 = 2
    /// The size of each of the two slots.
    static let slot = 64

    static func path(in directory: String) -> String { directory + "/" + name }

    /// The slot's bytes: the framed payload (``RecordFrame``: a length and a CRC-32), zero-padded.
    func encode() -> [UInt8] {
        var payload = Self.magic + [Self.version, clean ? 1 : 0]
        func put(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { payload += $0 } }
        put(sequence)
        put(UInt64(segments))
        put(UInt64(committed))
        put(UInt64(bytes))
        put(events)
        put(UInt64(first))
        let framed = RecordFrame.encode(payload)
        return framed + [UInt8](repeating: 0, count: Self.slot - framed.count)
    }

    /// The manifest a slot's `bytes` hold, or why they hold none.
    static func decode(_ bytes: ArraySlice<UInt8>) -> Result<Manifest, ManifestProblem> {
        guard case .record(let payload, _) = RecordFrame.read(Array(bytes), at: 0) else {
            return .failure(ManifestProblem("it is incomplete or fails its checksum"))
        }
        let body = Array(payload)
        guard body.count >= 5, Array(body[0..<4]) == magic else {
            return .failure(ManifestProblem("it is not a store manifest"))
        }
        guard body[4] == version || body[4] == 1 else {
            return .failure(ManifestProblem("it has version \(body[4]), not \(version)"))
        }
        guard body.count == (body[4] == 1 ? 46 : 54) else {
            return .failure(ManifestProblem("it is \(body.count) bytes"))
        }
        func word(_ at: Int) -> UInt64 {
            body[at..<at + 8].reversed().reduce(0) { $0 << 8 | UInt64($1) }
        }
        let (sequence, segments, committed, bytes, events) = (word(6), word(14), word(22), word(30), word(38))
        let first = body[4] == 1 ? 0 : word(46)
        guard segments < 1 << 31, first < max(1, segments), committed < 1 << 40, bytes < 1 << 62 else {
            return .failure(ManifestProblem("its counts are out of range"))
        }
        return .success(
            Manifest(
                segments: Int(segments),
                first: Int(first),
                committed: Int(committed),
                bytes: Int(bytes),
                events: events,
                clean: body[5] == 1,
                sequence: sequence
            )
        )
    }

    /// The manifest in `directory`: `nil` if there is none (a new store, or one written before
    /// manifests).
    ///
    /// - Throws: `corrupted` when neither slot holds a manifest.
    static func read(in directory: String) throws(EventStoreError) -> Manifest? {
        let path = path(in: directory)
        let descriptor = path.withCString { open($0, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw Files.error("open \(path)")
        }
        defer { Files.release(descriptor) }
        let bytes = try Files.readBytes(descriptor, count: 2 * slot, at: 0, path: path)
        var found: Manifest?
        var problem = ManifestProblem("the file is empty")
        for start in stride(from: 0, to: bytes.count, by: slot) {
            switch decode(bytes[start..<min(bytes.count, start + slot)]) {
            case .success(let manifest):
                if manifest.sequence >= found?.sequence ?? 0 { found = manifest }
            case .failure(let reason):
                problem = reason
            }
        }
        guard let found else {
            throw EventStoreError(
                .corrupted(location: path, reason: "the store's manifest is damaged: \(problem.reason)")
            )
        }
        return found
    }

    /// Writes this manifest into its slot (by its sequence number) and syncs it. The first write makes
    /// the file whole (both slots) under another name and renames it, so a crash never leaves an empty
    /// or half-written manifest.
    func write(in directory: String) throws(EventStoreError) {
        let path = Self.path(in: directory)
        let existing = path.withCString { open($0, O_WRONLY | O_CLOEXEC) }
        if existing < 0 {
            guard errno == ENOENT else { throw Files.error("open \(path)") }
            let temporary = path + ".new"
            try Self.put(encode() + encode(), at: 0, into: temporary, creating: true)
            guard rename(temporary, path) == 0 else { throw Files.error("rename \(temporary) to \(path)") }
            try Files.syncDirectory(directory)
            return
        }
        Files.release(existing)
        try Self.put(encode(), at: Int(sequence % 2) * Self.slot, into: path, creating: false)
    }

    /// Writes `bytes` at `offset` of the file at `path` and syncs it.
    private static func put(_ bytes: [UInt8], at offset: Int, into path: String, creating: Bool) throws(EventStoreError)
    {
        let flags = O_WRONLY | O_CLOEXEC | (creating ? O_CREAT | O_TRUNC : 0)
        let descriptor = path.withCString { open($0, flags, 0o644) }
        guard descriptor >= 0 else { throw Files.error("open \(path)") }
        defer { Files.release(descriptor) }
        let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
        if written != bytes.count { throw Files.error("write \(path)", code: written < 0 ? errno : EIO) }
        guard fdatasync(descriptor) == 0 else { throw Files.error("sync \(path)") }
    }
}

/// Why a manifest's bytes hold no manifest.
struct ManifestProblem: Error {
    let reason: String

    init(_ reason: String) { self.reason = reason }
}
