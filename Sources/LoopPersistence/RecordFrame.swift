/// How a durable store frames each record in an append-only file: the payload's length and a CRC-32 of
/// it, then the payload, so a reader can tell a complete record from a torn or damaged one.
///
/// ```
/// | length: UInt32, little-endian | crc32: UInt32, little-endian | payload: length bytes |
/// ```
///
/// A file is a sequence of frames. Reading one back says what is there: a record, the clean end, a
/// **torn tail** (the last frame is incomplete, or its checksum fails: a write the process did not
/// finish), or **corruption** (a damaged frame with more data after it). What a store makes of each is
/// its own rule: the file store, for one, decides by its commit records whether damage is a write it
/// never acknowledged (cut and reported) or loss (an error naming the offset, never skipped).
public enum RecordFrame {
    /// The bytes of the header before each payload.
    public static let headerSize = 8
    /// The largest payload a frame may hold; a larger declared length is damage, not a record.
    public static let maximumPayload = 64 * 1_024 * 1_024

    /// What reading at an offset found.
    public enum Read: Equatable, Sendable {
        /// A complete record, and the offset of the frame after it.
        case record(payload: ArraySlice<UInt8>, next: Int)
        /// No more data.
        case end
        /// The frame at `offset` is the last and is incomplete or fails its checksum: a write that was
        /// not finished. Everything before `offset` is good.
        case tornTail(offset: Int)
        /// The frame at `offset` is damaged and data follows it.
        case corrupted(offset: Int, reason: String)
    }

    /// The frame holding `payload`.
    public static func encode(_ payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(headerSize + payload.count)
        append(framing: payload, to: &frame)
        return frame
    }

    /// Appends the frame holding `payload` to `bytes`: what ``encode(_:)`` returns, without a buffer of
    /// its own (a store's writer frames each record of a batch straight into the batch).
    package static func append(framing payload: [UInt8], to bytes: inout [UInt8]) {
        // No `reserveCapacity` here: reserving the exact size for each frame would defeat the array's
        // geometric growth and copy the whole batch once per record.
        append(UInt32(truncatingIfNeeded: payload.count), to: &bytes)
        append(CRC32.checksum(payload), to: &bytes)
        bytes += payload
    }

    /// Reads the frame at `offset` of `bytes`.
    public static func read(_ bytes: [UInt8], at offset: Int) -> Read {
        guard offset < bytes.count else { return .end }
        guard bytes.count - offset >= headerSize else { return .tornTail(offset: offset) }
        let length = Int(word(bytes, at: offset))
        let expected = word(bytes, at: offset + 4)
        guard length <= maximumPayload else {
            return .corrupted(offset: offset, reason: "a declared length of \(length) bytes, past the limit")
        }
        let start = offset + headerSize
        guard bytes.count - start >= length else { return .tornTail(offset: offset) }
        let payload = bytes[start..<(start + length)]
        guard CRC32.checksum(payload) == expected else {
            if start + length == bytes.count { return .tornTail(offset: offset) }
            return .corrupted(offset: offset, reason: "the checksum does not match the \(length)-byte payload")
        }
        return .record(payload: payload, next: start + length)
    }

    private static func append(_ value: UInt32, to bytes: inout [UInt8]) {
        for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }

    /// The payload length a frame's header declares (the header's first word).
    static func declaredLength(_ header: [UInt8]) -> Int {
        header.count >= headerSize ? Int(word(header, at: 0)) : 0
    }

    private static func word(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[offset + $1]) << UInt32(8 * $1) }
    }
}

/// The CRC-32 of IEEE 802.3 (the one zlib and PNG use), computed with a table.
public enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        (0..<8).reduce(UInt32(index)) { crc, _ in crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
    }

    /// The checksum of `bytes`.
    public static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        // Contiguous bytes (an array, a slice of one) are read in place, without a generic iterator.
        if let fast = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0), continuing: 0) }) {
            return fast
        }
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }

    /// The checksum of `previous`'s bytes followed by `bytes`, where `previous` is the checksum of the
    /// bytes before (0 for none): a large file is checked in pieces, without a copy of it whole.
    static func checksum(_ bytes: UnsafeRawBufferPointer, continuing previous: UInt32) -> UInt32 {
        var crc = previous ^ 0xFFFF_FFFF
        table.withUnsafeBufferPointer { table in
            for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
