/// How a durable loop lays out what it stores. An event with nothing beside it, and a snapshot with no
/// callers' keys, are stored as the codec's bytes alone (so stores written before keys existed read as
/// they always did); an event with a note, or a snapshot with keys, starts with a marker no codec of
/// this package begins with (`0xFF "EL"`, then a format byte), then what the loop keeps, then the
/// codec's bytes.
///
/// Event with a note:    marker, 1, flags (1: key, 2: answers), [key entry], [count, answers], event
/// Snapshot with keys:   marker, 2, capacity, count, entries, state
/// A key entry:          key (length, UTF-8), version, fingerprint, reply, answer flag, [answer]
/// An answer:            reply, version, 0 and the encoded value, or 1 and why it did not encode
///
/// Numbers are LEB128 varints; lengths are checked, so damaged bytes are a ``CodecError``, never a trap.
@usableFromInline
enum RecordEnvelope {
    static let marker: [UInt8] = [0xFF, 0x45, 0x4C]
    static let noted: UInt8 = 1
    static let keyed: UInt8 = 2

    /// The stored bytes of an event encoded as `event`, with `note` beside it.
    @usableFromInline
    static func event(_ event: [UInt8], note: EventNote?) -> [UInt8] {
        guard let note, !note.isEmpty else { return event }
        var bytes: [UInt8] = []
        // The marker, the layout and flags, a key entry's numbers (5 varints and a flag), its key; the
        // answers' numbers and values; the event: one allocation for most records.
        bytes.reserveCapacity(
            marker.count + 2 + 60 + (note.key?.key.utf8.count ?? 0)
                + note.answers.reduce(0) { $0 + 40 + ((try? $1.payload.get())?.count ?? 0) } + event.count
        )
        bytes += marker
        bytes.append(noted)
        bytes.append((note.key == nil ? 0 : 1) | (note.answers.isEmpty ? 0 : 2))
        if let key = note.key { put(key, &bytes) }
        if !note.answers.isEmpty {
            BinaryTag.putVarint(UInt64(note.answers.count), &bytes)
            for answer in note.answers { put(answer, &bytes) }
        }
        bytes += event
        return bytes
    }

    /// The codec's bytes of a stored event, and its note.
    @usableFromInline
    static func event(_ stored: [UInt8]) throws(CodecError) -> (event: [UInt8], note: EventNote?) {
        guard stored.starts(with: marker) else { return (stored, nil) }
        var reader = Reader(stored[marker.count...])
        guard try reader.byte() == noted else { throw CodecError("an event record of an unknown layout") }
        let flags = try reader.byte()
        var note = EventNote()
        if flags & 1 != 0 { note.key = try reader.entry() }
        if flags & 2 != 0 {
            for _ in 0..<(try reader.count()) { note.answers.append(try reader.answer()) }
        }
        return (Array(reader.rest), note)
    }

    /// The stored bytes of a snapshot encoded as `state`, with the callers' keys `keys`.
    @usableFromInline
    static func snapshot(_ state: [UInt8], keys: KeyWindow?) -> [UInt8] {
        guard let keys, keys.count > 0 else { return state }
        var bytes = marker + [keyed]
        BinaryTag.putVarint(UInt64(keys.capacity), &bytes)
        let entries = keys.all
        BinaryTag.putVarint(UInt64(entries.count), &bytes)
        for entry in entries { put(entry, &bytes) }
        return bytes + state
    }

    /// The codec's bytes of a stored snapshot, and the keys it carries, in a window of `capacity`.
    @usableFromInline
    static func snapshot(
        _ stored: [UInt8],
        capacity: Int
    ) throws(CodecError) -> (state: [UInt8], keys: KeyWindow?) {
        guard stored.starts(with: marker) else { return (stored, nil) }
        var reader = Reader(stored[marker.count...])
        guard try reader.byte() == keyed else { throw CodecError("a snapshot record of an unknown layout") }
        _ = try reader.varint()  // the capacity it was written with; the loop's own decides what it keeps
        var keys = KeyWindow(capacity: capacity)
        for _ in 0..<(try reader.count()) { keys.insert(try reader.entry()) }
        return (Array(reader.rest), keys)
    }

    private static func put(_ entry: KeyWindow.Entry, _ bytes: inout [UInt8]) {
        BinaryTag.putVarint(UInt64(entry.key.utf8.count), &bytes)
        bytes += entry.key.utf8
        BinaryTag.putVarint(entry.version, &bytes)
        BinaryTag.putVarint(entry.fingerprint, &bytes)
        BinaryTag.putVarint(entry.reply, &bytes)
        if let answer = entry.answer {
            bytes.append(1)
            put(answer, &bytes)
        } else {
            bytes.append(0)
        }
    }

    private static func put(_ answer: RecordedAnswer, _ bytes: inout [UInt8]) {
        BinaryTag.putVarint(answer.reply, &bytes)
        BinaryTag.putVarint(answer.version, &bytes)
        switch answer.payload {
        case .success(let value):
            bytes.append(0)
            put(value, &bytes)
        case .failure(let error):
            bytes.append(1)
            put(Array(error.description.utf8), &bytes)
        }
    }

    private static func put(_ blob: [UInt8], _ bytes: inout [UInt8]) {
        BinaryTag.putVarint(UInt64(blob.count), &bytes)
        bytes += blob
    }

    /// Reads what ``put`` wrote, checking every length against what is left.
    struct Reader {
        var rest: ArraySlice<UInt8>

        init(_ bytes: ArraySlice<UInt8>) {
            rest = bytes
        }

        mutating func byte() throws(CodecError) -> UInt8 {
            guard let byte = rest.popFirst() else { throw CodecError("a record cut short") }
            return byte
        }

        mutating func varint() throws(CodecError) -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = try self.byte()
                guard shift < 64 else { throw CodecError("a number too long in a record") }
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
        }

        /// A count or length, no larger than what is left to read.
        mutating func count() throws(CodecError) -> Int {
            let count = try varint()
            guard count <= UInt64(rest.count) else { throw CodecError("a length past the end of a record") }
            return Int(count)
        }

        mutating func blob() throws(CodecError) -> [UInt8] {
            let count = try self.count()
            defer { rest = rest.dropFirst(count) }
            return Array(rest.prefix(count))
        }

        mutating func text() throws(CodecError) -> String {
            String(decoding: try blob(), as: UTF8.self)
        }

        mutating func answer() throws(CodecError) -> RecordedAnswer {
            let reply = try varint()
            let version = try varint()
            switch try byte() {
            case 0: return RecordedAnswer(reply: reply, version: version, payload: .success(try blob()))
            case 1: return RecordedAnswer(reply: reply, version: version, payload: .failure(CodecError(try text())))
            default: throw CodecError("an answer of an unknown kind in a record")
            }
        }

        mutating func entry() throws(CodecError) -> KeyWindow.Entry {
            let key = try text()
            let version = try varint()
            let fingerprint = try varint()
            let reply = try varint()
            var entry = KeyWindow.Entry(key: key, version: version, fingerprint: fingerprint, reply: reply)
            switch try byte() {
            case 0: break
            case 1: entry.answer = try answer()
            default: throw CodecError("a key entry of an unknown kind in a record")
            }
            return entry
        }
    }
}

/// A 64-bit FNV-1a digest: the same bytes give the same digest in every process and on every machine.
@usableFromInline
func fingerprint<Bytes: Sequence<UInt8>>(_ bytes: Bytes, seed: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64 {
    var hash = seed
    for byte in bytes {
        hash ^= UInt64(byte)
        hash &*= 0x0000_0100_0000_01B3
    }
    return hash
}
