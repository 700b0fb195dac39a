/// Where a record starts: its segment and its offset there, packed into one word (segment in the top
/// 24 bits, offset in the low 40) so the index spends 8 bytes on it.
struct Location: Hashable, Sendable {
    /// No record: the start of a stream's back-chain.
    static let none = Location(packed: .max)

    let packed: UInt64

    init(packed: UInt64) {
        self.packed = packed
    }

    init(segment: Int, offset: Int) {
        packed = UInt64(segment) << 40 | UInt64(offset)
    }

    var segment: Int { Int(packed >> 40) }
    var offset: Int { Int(packed & 0xFF_FFFF_FFFF) }
}

/// One record of the log, the payload of one ``RecordFrame``: either a batch of events appended to a
/// stream in one call (so an append is all or nothing on disk), or a snapshot.
///
/// ```
/// kind: UInt8 (1 events, 2 snapshot, 3 commit, 4 relocated events) | stream length: UInt32 | stream: UTF-8
///       | version: UInt64
/// events, relocated events:
///           previous: UInt64 (Location of the stream's previous events record) | count: UInt32
///           | count x (length: UInt32 | payload)
/// snapshot: payload (the rest)
/// commit:   (after the kind) start: UInt64, the offset where its group commit began
/// ```
///
/// For events, `version` is the first event's; for a snapshot, the last event folded into it. All
/// integers are little-endian.
///
/// Relocated events are the copies compaction makes of the events a stream keeps (see
/// ``FileEventStore/Retention``): the first of a relocation has no previous record and starts the
/// stream's chain afresh, the records before it in the log are the stream's no longer; it may hold no
/// events at all, when the stream keeps none (only its version then).
enum LogRecord: Equatable {
    case events(stream: String, first: UInt64, previous: Location, payloads: [[UInt8]])
    case relocated(stream: String, first: UInt64, previous: Location, payloads: [[UInt8]])
    case snapshot(Snapshot)
    /// The end of one group commit: the records since the previous commit, which began at `start`,
    /// were all written before this; a record after the last commit was never acknowledged.
    case commit(start: UInt64)

    static let eventsKind: UInt8 = 1
    static let snapshotKind: UInt8 = 2
    static let commitKind: UInt8 = 3
    static let relocatedKind: UInt8 = 4

    /// The events a record holds, either kind.
    var events: (stream: String, first: UInt64, previous: Location, payloads: [[UInt8]])? {
        switch self {
        case .events(let stream, let first, let previous, let payloads),
            .relocated(let stream, let first, let previous, let payloads):
            (stream, first, previous, payloads)
        case .snapshot, .commit: nil
        }
    }

    /// The encoded record.
    func encode() -> [UInt8] {
        var bytes: [UInt8] = []
        switch self {
        case .events(let stream, let first, let previous, let payloads),
            .relocated(let stream, let first, let previous, let payloads):
            let utf8 = Array(stream.utf8)
            bytes.reserveCapacity(29 + utf8.count + payloads.reduce(0) { $0 + 4 + $1.count })
            if case .relocated = self { bytes.append(Self.relocatedKind) } else { bytes.append(Self.eventsKind) }
            Self.put(UInt32(utf8.count), &bytes)
            bytes += utf8
            Self.put(first, &bytes)
            Self.put(previous.packed, &bytes)
            Self.put(UInt32(payloads.count), &bytes)
            for payload in payloads {
                Self.put(UInt32(payload.count), &bytes)
                bytes += payload
            }
        case .commit(let start):
            bytes.append(Self.commitKind)
            Self.put(start, &bytes)
        case .snapshot(let snapshot):
            let utf8 = Array(snapshot.stream.utf8)
            bytes.reserveCapacity(13 + utf8.count + snapshot.payload.count)
            bytes.append(Self.snapshotKind)
            Self.put(UInt32(utf8.count), &bytes)
            bytes += utf8
            Self.put(snapshot.version, &bytes)
            bytes += snapshot.payload
        }
        return bytes
    }

    /// The bytes an events record of `stream` holding `payloads` takes, frame included.
    static func framedSize(stream: String, payloads: [[UInt8]]) -> Int {
        RecordFrame.headerSize + 25 + stream.utf8.count + payloads.reduce(0) { $0 + 4 + $1.count }
    }

    /// The record `bytes` hold, or why they hold none.
    static func decode(_ bytes: ArraySlice<UInt8>) throws(RecordError) -> LogRecord {
        var reader = Reader(bytes: bytes)
        let kind = try reader.byte()
        if kind == commitKind {
            let start = try reader.word64()
            guard reader.remaining == 0 else { throw RecordError("\(reader.remaining) bytes after a commit") }
            return .commit(start: start)
        }
        let length = Int(try reader.word32())
        let stream = String(decoding: try reader.take(length), as: UTF8.self)
        let version = try reader.word64()
        switch kind {
        case eventsKind, relocatedKind:
            let previous = Location(packed: try reader.word64())
            let count = Int(try reader.word32())
            // Each event takes at least its 4-byte length: a larger count is damage, not a batch. Only the
            // start of a relocation may hold none.
            guard count <= reader.remaining / 4, count > 0 || (kind == relocatedKind && previous == .none) else {
                throw RecordError("a batch of \(count) events")
            }
            var payloads: [[UInt8]] = []
            payloads.reserveCapacity(count)
            for _ in 0..<count { payloads.append(Array(try reader.take(Int(try reader.word32())))) }
            guard reader.remaining == 0 else { throw RecordError("\(reader.remaining) bytes after the last event") }
            guard version > 0 else { throw RecordError("an event at version 0") }
            return kind == eventsKind
                ? .events(stream: stream, first: version, previous: previous, payloads: payloads)
                : .relocated(stream: stream, first: version, previous: previous, payloads: payloads)
        case snapshotKind:
            return .snapshot(
                Snapshot(stream: stream, version: version, payload: Array(try reader.take(reader.remaining)))
            )
        default:
            throw RecordError("an unknown record kind \(kind)")
        }
    }

    static func put(_ value: some FixedWidthInteger, _ bytes: inout [UInt8]) {
        var value = value.littleEndian
        withUnsafeBytes(of: &value) { bytes += $0 }
    }

    /// Reads little-endian integers and byte runs, failing (never trapping) at the end of the bytes.
    struct Reader {
        let bytes: ArraySlice<UInt8>
        var position: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            position = bytes.startIndex
        }

        var remaining: Int { bytes.endIndex - position }

        mutating func take(_ count: Int) throws(RecordError) -> ArraySlice<UInt8> {
            guard count >= 0, count <= remaining else { throw RecordError("a field runs past the record's end") }
            defer { position += count }
            return bytes[position..<(position + count)]
        }

        mutating func byte() throws(RecordError) -> UInt8 {
            try take(1).first ?? 0
        }

        mutating func word32() throws(RecordError) -> UInt32 {
            try take(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        }

        mutating func word64() throws(RecordError) -> UInt64 {
            try take(8).reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
    }
}

/// Why a frame's payload is not a record.
struct RecordError: Error {
    let reason: String

    init(_ reason: String) {
        self.reason = reason
    }
}
