/// How a durable loop lays out what it stores. An event with nothing beside it, and a snapshot with no
/// callers' keys, are stored as the codec's bytes alone (so stores written before keys existed read as
/// they always did); an event with a note, or a snapshot with keys, starts with a marker no codec of
/// this package begins with (`0xFF "EL"`, then a format byte), then what the loop keeps, then the
/// codec's bytes.
///
/// The codec's bytes alone are written only when they do not begin with the marker themselves; those
/// that do are written as an event with an empty note (marker, 1, 0, event) or a snapshot with no keys
/// (marker, 2, 0, 0, state), which every release since keys reads. (Such bytes that an earlier release
/// wrote alone are read as a layout, and fail, as they did then.)
///
/// Event with a note:    marker, 1, flags (1: key, 2: answers, 4: timers), [key entry], [count, answers],
///                       [timers], event
/// A note alone:         marker, 3, flags, the same parts, and no event (a record of timers that started)
/// With throttles:       marker, 5 (an event) or 6 (a note alone), then as 1 or 3, with the timers part's
///                       throttled form (older versions refuse these layouts rather than misread them)
/// With a revision:      marker, 7 (an event) or 8 (a note alone), flags (1: key, 2: answers, 4: timers,
///                       8: timers in the throttled form, 16: revision), [key entry], [count, answers],
///                       [timers], [revision], event: the note of the first record a new program revision
///                       appends (written only then, so stores of programs that never change revision
///                       keep the layouts above)
/// Snapshot with keys:   marker, 2, capacity, count, entries, state
/// Snapshot with timers: marker, 4, flags (1: keys, 2: timers), [capacity, count, entries],
///                       [count, waiting timers], state
/// Snapshot of a revision: marker, 9, flags (1: keys, 2: timers, 4: revision), [capacity, count, entries],
///                       [count, waiting timers], [revision], state: a snapshot a program of revision 2
///                       or later saved
/// A key entry:          key (length, UTF-8), version, fingerprint, reply, answer flag, [answer]
/// An answer:            reply, version, 0 and the encoded value, or 1 and why it did not encode
/// Timers of a record:   time written, count, started (position, delay, effect), count, ended (version,
///                       position), count, fired (version, position)
/// Throttled form:       the same, with each started one's kind after its delay, and then count,
///                       renewed (version, position)
/// A waiting timer:      version, position, delay, flags (1: due; kind times 2), [due], effect
///
/// Numbers are LEB128 varints (times and delays in nanoseconds, zigzag-encoded); lengths are checked, so
/// damaged bytes are a ``CodecError``, never a trap.
@usableFromInline
enum RecordEnvelope {
    static let marker: [UInt8] = [0xFF, 0x45, 0x4C]
    static let noted: UInt8 = 1
    static let keyed: UInt8 = 2
    static let bare: UInt8 = 3
    static let kept: UInt8 = 4
    static let notedThrottled: UInt8 = 5
    static let bareThrottled: UInt8 = 6
    static let notedRevision: UInt8 = 7
    static let bareRevision: UInt8 = 8
    static let keptRevision: UInt8 = 9

    /// The stored bytes of an event encoded as `event`, with `note` beside it; of the note alone when
    /// `event` is `nil`. (A timer's effect that did not encode is written empty: the loop refuses such a
    /// batch before it is written.)
    @usableFromInline
    static func event(_ event: [UInt8]?, note: EventNote?) -> [UInt8] {
        guard let note, !note.isEmpty else {
            // The codec's bytes alone, unless they begin as the marker does (a codec of the program's own
            // may write anything): those go behind an empty note, so they are not read as a layout.
            guard let event, event.starts(with: marker) else { return event ?? [] }
            return marker + [noted, 0] + event
        }
        let throttled = note.timers.isThrottled
        let layout =
            if note.revision != nil {
                event == nil ? bareRevision : notedRevision
            } else {
                event == nil ? (throttled ? bareThrottled : bare) : (throttled ? notedThrottled : noted)
            }
        let event = event ?? []
        var bytes: [UInt8] = []
        // The marker, the layout and flags, a key entry's numbers (5 varints and a flag), its key; the
        // answers' numbers and values; the event: one allocation for most records.
        bytes.reserveCapacity(
            marker.count + 2 + 60 + (note.key?.key.utf8.count ?? 0)
                + note.answers.reduce(0) { $0 + 40 + ((try? $1.payload.get())?.count ?? 0) } + event.count
        )
        bytes += marker
        bytes.append(layout)
        var flags: UInt8 = (note.key == nil ? 0 : 1) | (note.answers.isEmpty ? 0 : 2) | (note.timers.isEmpty ? 0 : 4)
        if note.revision != nil { flags |= (throttled ? 8 : 0) | 16 }
        bytes.append(flags)
        if let key = note.key { put(key, &bytes) }
        if !note.answers.isEmpty {
            BinaryTag.putVarint(UInt64(note.answers.count), &bytes)
            for answer in note.answers { put(answer, &bytes) }
        }
        if !note.timers.isEmpty { put(note.timers, throttled: throttled, &bytes) }
        if let revision = note.revision { BinaryTag.putVarint(UInt64(revision), &bytes) }
        bytes += event
        return bytes
    }

    /// The codec's bytes of a stored event (`nil` for a record of a note alone), and its note.
    @usableFromInline
    static func event(_ stored: [UInt8]) throws(CodecError) -> (event: [UInt8]?, note: EventNote?) {
        guard stored.starts(with: marker) else { return (stored, nil) }
        var reader = Reader(stored[marker.count...])
        let layout = try reader.byte()
        guard [noted, bare, notedThrottled, bareThrottled, notedRevision, bareRevision].contains(layout) else {
            throw CodecError("an event record of an unknown layout")
        }
        let flags = try reader.byte()
        let revised = layout == notedRevision || layout == bareRevision
        let throttled = layout == notedThrottled || layout == bareThrottled || (revised && flags & 8 != 0)
        var note = EventNote()
        if flags & 1 != 0 { note.key = try reader.entry() }
        if flags & 2 != 0 {
            for _ in 0..<(try reader.count()) { note.answers.append(try reader.answer()) }
        }
        if flags & 4 != 0 { note.timers = try reader.timers(throttled: throttled) }
        if revised, flags & 16 != 0 { note.revision = try reader.revision() }
        guard layout == noted || layout == notedThrottled || layout == notedRevision else {
            guard reader.rest.isEmpty else { throw CodecError("a record of a note alone with bytes after it") }
            return (nil, note)
        }
        return (Array(reader.rest), note)
    }

    /// The stored bytes of a snapshot encoded as `state`, with the callers' keys `keys` and the timers
    /// waiting, `timers` (each with its due time).
    @usableFromInline
    static func snapshot(
        _ state: [UInt8],
        keys: KeyWindow?,
        timers: [RecordedTimer] = [],
        revision: UInt32 = 1
    ) -> [UInt8] {
        let keys = keys.flatMap { $0.count > 0 ? $0 : nil }
        guard keys != nil || !timers.isEmpty || revision != 1 else {
            // As for events: a state whose bytes begin as the marker does goes behind the layout of
            // keys, with none (capacity 0, count 0), which every release since keys reads.
            guard state.starts(with: marker) else { return state }
            return marker + [keyed, 0, 0] + state
        }
        var bytes = marker
        if revision != 1 {
            bytes.append(keptRevision)
            bytes.append((keys == nil ? 0 : 1) | (timers.isEmpty ? 0 : 2) | 4)
        } else if timers.isEmpty {
            bytes.append(keyed)
        } else {
            bytes.append(kept)
            bytes.append((keys == nil ? 0 : 1) | 2)
        }
        if let keys {
            BinaryTag.putVarint(UInt64(keys.capacity), &bytes)
            let entries = keys.all
            BinaryTag.putVarint(UInt64(entries.count), &bytes)
            for entry in entries { put(entry, &bytes) }
        }
        if !timers.isEmpty {
            BinaryTag.putVarint(UInt64(timers.count), &bytes)
            for timer in timers {
                BinaryTag.putVarint(timer.version, &bytes)
                BinaryTag.putVarint(UInt64(timer.index), &bytes)
                put(timer.delay, &bytes)
                bytes.append((timer.due == nil ? 0 : 1) | timer.kind.rawValue << 1)
                if let due = timer.due { put(due, &bytes) }
                put(timer.payload, &bytes)
            }
        }
        if revision != 1 { BinaryTag.putVarint(UInt64(revision), &bytes) }
        return bytes + state
    }

    /// The codec's bytes of a stored snapshot, the keys it carries, in a window of `capacity`, and the
    /// timers waiting.
    @usableFromInline
    static func snapshot(
        _ stored: [UInt8],
        capacity: Int
    ) throws(CodecError) -> (state: [UInt8], keys: KeyWindow?, timers: [RecordedTimer], revision: UInt32) {
        guard stored.starts(with: marker) else { return (stored, nil, [], 1) }
        var reader = Reader(stored[marker.count...])
        let layout = try reader.byte()
        let flags: UInt8
        switch layout {
        case keyed: flags = 1
        case kept: flags = try reader.byte() & 3
        case keptRevision: flags = try reader.byte()
        default: throw CodecError("a snapshot record of an unknown layout")
        }
        var keys: KeyWindow?
        if flags & 1 != 0 {
            _ = try reader.varint()  // the capacity it was written with; the loop's own decides what it keeps
            var window = KeyWindow(capacity: capacity)
            for _ in 0..<(try reader.count()) { window.insert(try reader.entry()) }
            keys = window
        }
        var timers: [RecordedTimer] = []
        if flags & 2 != 0 {
            for _ in 0..<(try reader.count()) {
                let version = try reader.varint()
                let index = try reader.index()
                let delay = try reader.duration()
                let flags = try reader.byte()
                guard let kind = TimerKind(rawValue: flags >> 1) else {
                    throw CodecError("a timer of an unknown kind in a snapshot")
                }
                let due: Duration? = flags & 1 != 0 ? try reader.duration() : nil
                timers.append(
                    RecordedTimer(
                        version: version,
                        index: index,
                        payload: try reader.blob(),
                        delay: delay,
                        due: due,
                        kind: kind
                    )
                )
            }
        }
        let revision = flags & 4 != 0 ? try reader.revision() : 1
        return (Array(reader.rest), keys, timers, revision)
    }

    private static func put(_ timers: TimerNote, throttled: Bool, _ bytes: inout [UInt8]) {
        put(timers.recordedAt ?? .zero, &bytes)
        BinaryTag.putVarint(UInt64(timers.started.count), &bytes)
        for started in timers.started {
            BinaryTag.putVarint(UInt64(started.index), &bytes)
            put(started.delay, &bytes)
            if throttled { bytes.append(started.kind.rawValue) }
            put((try? started.payload.get()) ?? [], &bytes)
        }
        for names in throttled ? [timers.ended, timers.fired, timers.renewed] : [timers.ended, timers.fired] {
            BinaryTag.putVarint(UInt64(names.count), &bytes)
            for name in names {
                BinaryTag.putVarint(name.version, &bytes)
                BinaryTag.putVarint(UInt64(name.index), &bytes)
            }
        }
    }

    /// A duration, in nanoseconds (saturated at about ±292 years), zigzag-encoded.
    private static func put(_ duration: Duration, _ bytes: inout [UInt8]) {
        let (seconds, attoseconds) = duration.components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, overflowAgain) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        let nanoseconds = overflow || overflowAgain ? (seconds < 0 ? Int64.min : Int64.max) : sum
        BinaryTag.putVarint(UInt64(bitPattern: (nanoseconds << 1) ^ (nanoseconds >> 63)), &bytes)
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

        /// A position among an event's effects.
        mutating func index() throws(CodecError) -> Int {
            let index = try varint()
            guard index <= UInt64(Int32.max) else { throw CodecError("an effect position too large in a record") }
            return Int(index)
        }

        /// A program revision (see ``EventNote/revision``).
        mutating func revision() throws(CodecError) -> UInt32 {
            let revision = try varint()
            guard revision <= UInt64(UInt32.max) else { throw CodecError("a program revision too large in a record") }
            return UInt32(revision)
        }

        /// A duration written by ``RecordEnvelope/put(_:_:)``.
        mutating func duration() throws(CodecError) -> Duration {
            let zigzag = try varint()
            return .nanoseconds(Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1))
        }

        /// The timers part of a record.
        mutating func timers(throttled: Bool) throws(CodecError) -> TimerNote {
            var note = TimerNote(recordedAt: try duration())
            for _ in 0..<(try count()) {
                let index = try self.index()
                let delay = try duration()
                var kind = TimerKind.wait
                if throttled {
                    guard let read = TimerKind(rawValue: try byte()) else {
                        throw CodecError("a timer of an unknown kind in a record")
                    }
                    kind = read
                }
                note.started.append(
                    TimerNote.Started(index: index, delay: delay, payload: .success(try blob()), kind: kind)
                )
            }
            for list in 0..<(throttled ? 3 : 2) {
                for _ in 0..<(try count()) {
                    let name = TimerName(version: try varint(), index: try self.index())
                    switch list {
                    case 0: note.ended.append(name)
                    case 1: note.fired.append(name)
                    default: note.renewed.append(name)
                    }
                }
            }
            return note
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

/// The codec's bytes of the program's event that a durable loop stored as `payload`, with what the loop
/// keeps beside it (keys, answers, timers) taken off; `nil` for a record that holds no event (timers
/// that started). For code of this package that reads durable streams without a loop: the cluster's
/// inbox ids, the demo's listing of a cluster's jobs.
package func storedEvent(_ payload: [UInt8]) throws(CodecError) -> [UInt8]? {
    try RecordEnvelope.event(payload).event
}

/// The answers to keyed requests that a durable loop recorded with the event it stored as `payload`
/// (none for a record without a note). For code of this package that passes answers on without a loop:
/// a cluster's store, which writes them where a caller in another process reads them.
package func storedAnswers(_ payload: [UInt8]) throws(CodecError) -> [RecordedAnswer] {
    try RecordEnvelope.event(payload).note?.answers ?? []
}
