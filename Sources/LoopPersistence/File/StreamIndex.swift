/// What the file store keeps in memory for one stream: its version, where its last events record is,
/// its latest snapshot, and a sparse list of checkpoints (one per ``StreamIndex/checkpointInterval``
/// versions) so a read starts near the events it wants instead of at the end of the stream.
///
/// Each events record points back to the stream's previous one, so reading walks that chain from the
/// first checkpoint after the page; memory per stream is a few words plus 16 bytes per
/// ``StreamIndex/checkpointInterval`` events, not a position per event.
struct StreamEntry: Sendable {
    /// The first version of an events record, and where it is.
    struct Checkpoint: Sendable {
        var first: UInt64
        var location: Location
    }

    /// A snapshot record the stream keeps: where it is, and the version it folds up to.
    struct SnapshotRef: Sendable, Hashable {
        var location: Location
        var version: UInt64
    }

    var version: UInt64 = 0
    var tail: Location = .none
    /// The snapshots kept, oldest first: the latest one, or under a retention policy the latest N.
    var snapshots: [SnapshotRef] = []
    var checkpoints: [Checkpoint] = []
    /// Where the stream's chain starts when compaction relocated it: its records before this in the log
    /// are no longer its; `.none` when it was never relocated (or its old records are gone).
    var chainStart: Location = .none

    /// The latest snapshot's record, or `.none`.
    var snapshot: Location { snapshots.last?.location ?? .none }
    /// The latest snapshot's version, or 0.
    var snapshotVersion: UInt64 { snapshots.last?.version ?? 0 }

    /// Records a snapshot of `version` at `location`, keeping the latest `keep` (at least one), in version
    /// order; a second record of a kept version (a relocated copy, met after the stream's newer snapshots
    /// when the log is read) replaces the first.
    mutating func saved(_ version: UInt64, at location: Location, keep: Int) {
        if let index = snapshots.firstIndex(where: { $0.version == version }) {
            snapshots[index].location = location
            return
        }
        let index = snapshots.firstIndex { $0.version > version } ?? snapshots.count
        snapshots.insert(SnapshotRef(location: location, version: version), at: index)
        if snapshots.count > max(1, keep) { snapshots.removeFirst(snapshots.count - max(1, keep)) }
    }

    /// The version up to which events may go under a policy keeping the events after the latest `keep`
    /// snapshots: the oldest of them, once there are that many; 0 (keep every event) before.
    func retainedAfter(keep: Int) -> UInt64 {
        keep > 0 && snapshots.count >= keep ? snapshots[snapshots.count - keep].version : 0
    }

    /// Records an events record of `count` events starting at `first`, at `location`.
    mutating func appended(first: UInt64, count: Int, at location: Location) {
        let last = first + UInt64(count) - 1
        let since = checkpoints.last?.first ?? 0
        if last >= since + StreamIndex.checkpointInterval {
            checkpoints.append(Checkpoint(first: first, location: location))
        }
        version = last
        tail = location
    }

    /// Where to start walking back to read up to version `last`: the first record known to start after
    /// it, or the stream's last record.
    func start(for last: UInt64) -> Location {
        var low = 0
        var high = checkpoints.count
        while low < high {
            let middle = (low + high) / 2
            if checkpoints[middle].first > last { high = middle } else { low = middle + 1 }
        }
        return low < checkpoints.count ? checkpoints[low].location : tail
    }
}

/// Tunables of the in-memory index.
enum StreamIndex {
    /// Versions between two checkpoints of a stream: the most records a read walks past.
    static let checkpointInterval: UInt64 = 256
}

/// Every stream's entry, kept compact: a 16-byte slot per stream (its last record, its version, where
/// its name is) and its name once, in tables split by hash into shards, so growing one never holds two
/// copies of the whole index; snapshots and checkpoints, which most streams of an entity group never
/// have, live in tables of their own, keyed by the name again. Names are compared as Swift compares
/// strings, in every one of these tables.
///
/// Measured on `loop-bench`'s w9 (a million streams of one event each): the index is most of the peak
/// resident growth not owed to the live loops (see `Docs/Performance.md`).
struct StreamTable: Sendable {
    struct Head: Sendable, Equatable {
        var version: UInt64
        var tail: Location
    }

    static let shardCount = 64

    private var shards = (0..<shardCount).map { HeadTable(shard: $0) }
    private var snapshots: [String: [StreamEntry.SnapshotRef]] = [:]
    private var checkpoints: [String: [StreamEntry.Checkpoint]] = [:]
    private var chainStarts: [String: Location] = [:]
    private(set) var count = 0

    subscript(stream: String) -> StreamEntry? {
        get {
            let hash = stream.hashValue
            let head = shards[hash & (Self.shardCount - 1)].value(for: stream, hash: hash)
            // The side tables are empty in many stores (no snapshots, no compaction): no lookup then.
            let snapshot = snapshots.isEmpty ? nil : snapshots[stream]
            guard head != nil || snapshot != nil else { return nil }
            var entry = StreamEntry()
            entry.version = head?.version ?? 0
            entry.tail = head?.tail ?? .none
            entry.snapshots = snapshot ?? []
            entry.checkpoints = checkpoints.isEmpty ? [] : checkpoints[stream] ?? []
            entry.chainStart = chainStarts.isEmpty ? .none : chainStarts[stream] ?? .none
            return entry
        }
        set {
            // Streams are never removed: a store only grows.
            guard let entry = newValue else { return }
            let hash = stream.hashValue
            let head = Head(version: entry.version, tail: entry.tail)
            if shards[hash & (Self.shardCount - 1)].update(head, for: stream, hash: hash) { count += 1 }
            // A stream that was never relocated only gains snapshots and checkpoints: nothing to clear.
            // A relocated one (a chain start) may have dropped its old chain's checkpoints.
            if entry.chainStart == .none {
                if !entry.snapshots.isEmpty { snapshots[stream] = entry.snapshots }
                if !entry.checkpoints.isEmpty { checkpoints[stream] = entry.checkpoints }
                return
            }
            Self.keep(entry.snapshots, for: stream, in: &snapshots)
            Self.keep(entry.checkpoints, for: stream, in: &checkpoints)
            chainStarts[stream] = entry.chainStart
        }
    }

    /// Sets or clears `stream`'s list in a side table, which holds only the streams that have one.
    private static func keep<Item>(_ items: [Item], for stream: String, in table: inout [String: [Item]]) {
        if !items.isEmpty {
            table[stream] = items
        } else if table[stream] != nil {
            table[stream] = nil
        }
    }

    /// Forgets every location in the log files before `segment`, which compaction removed: checkpoints
    /// there go, and a chain start there means the stream's older records are gone with them.
    mutating func forget(before segment: Int) {
        let limit = Location(segment: segment, offset: 0).packed
        for (stream, list) in checkpoints where list.first.map({ $0.location.packed < limit }) ?? false {
            let kept = list.filter { $0.location.packed >= limit }
            checkpoints[stream] = kept.isEmpty ? nil : kept
        }
        for (stream, start) in chainStarts where start.packed < limit { chainStarts[stream] = nil }
    }

    /// Makes room for about `streams` streams before they are added (what an index checkpoint says it
    /// holds), so loading them does not grow and rehash each shard a score of times on the way.
    mutating func reserve(_ streams: Int) {
        let each = streams / Self.shardCount
        for index in shards.indices { shards[index].reserve(each + each / 8) }
    }

    /// Calls `body` with every stream and its entry, in no particular order.
    func forEveryStream<Failure: Error>(_ body: (String, StreamEntry) throws(Failure) -> Void) throws(Failure) {
        for shard in shards {
            try shard.forEveryName { (stream: String, head: Head) throws(Failure) in
                var entry = StreamEntry()
                entry.version = head.version
                entry.tail = head.tail
                entry.snapshots = snapshots[stream] ?? []
                entry.checkpoints = checkpoints[stream] ?? []
                entry.chainStart = chainStarts[stream] ?? .none
                try body(stream, entry)
            }
        }
    }
}

/// One shard of the index: a hash table from stream names (their UTF-8 bytes) to heads, with linear
/// probing, filled to at most 7/8 and grown by a quarter (so from 70% to 87.5% full).
///
/// A slot is 16 bytes: the stream's last record, its version (below 2^24 - 1; a larger one is kept
/// aside), 8 bits of its name's hash (so a probe past another stream rarely reads that stream's name)
/// and where its name is in ``NameArena``, which keeps each name once. A `String` key and a value
/// took 32 bytes a slot, and a name past 15 bytes an allocation of its own besides. The shards start
/// at different capacities, so they do not all grow at the same counts: the index's fill, summed over
/// the shards, stays near its average rather than swinging with the count.
struct HeadTable: Sendable {
    struct Slot: Sendable {
        var tail: UInt64
        /// The version (the upper 24 bits; all ones when it is kept in `largeVersions`) and 8 bits of
        /// the name's hash.
        var versionAndTag: UInt32
        /// Where the name is in the arena; `UInt32.max` in an empty slot.
        var name: UInt32

        static let empty = Slot(tail: 0, versionAndTag: 0, name: .max)
        static let largeVersion: UInt32 = 0xFF_FFFF
    }

    private var slots: [Slot] = []
    private var names = NameArena()
    private var used = 0
    private let initialCapacity: Int
    /// The versions from `Slot.largeVersion` up, by the name's place in the arena.
    private var largeVersions: [UInt32: UInt64] = [:]
    /// The streams whose names the arena cannot hold (too long, or the arena is full).
    private var overflow: [String: StreamTable.Head] = [:]

    /// Shard `shard` of ``StreamTable/shardCount``: its first capacity is one of 16 to 19.
    init(shard: Int) {
        initialCapacity = 16 + 4 * shard / StreamTable.shardCount
    }

    private static func tag(_ hash: Int) -> UInt32 { UInt32(truncatingIfNeeded: hash >> 8) & 0xFF }

    /// The first slot a name of hash `hash` may be in: its place in the table's range.
    private func home(_ hash: Int) -> Int {
        Int(UInt64(bitPattern: Int64(hash)).multipliedFullWidth(by: UInt64(slots.count)).high)
    }

    /// The slot probed after `index`, wrapping at the table's end.
    private func next(_ index: Int) -> Int { index + 1 == slots.count ? 0 : index + 1 }

    /// The slot holding `stream` (whose hash is `hash`), or the empty slot where it would go.
    private func slot(of stream: String, hash: Int) -> Int {
        let tag = Self.tag(hash)
        var index = home(hash)
        var stream = stream
        return stream.withUTF8 { name in
            while slots[index].name != Slot.empty.name {
                let slot = slots[index]
                if slot.versionAndTag & 0xFF == tag && names.holds(name, at: slot.name) { return index }
                index = next(index)
            }
            return index
        }
    }

    /// Whether `stream` may be among the names the arena refused.
    private func mayOverflow(_ stream: String) -> Bool {
        !overflow.isEmpty && (stream.utf8.count > NameArena.longestName || names.isFull)
    }

    /// The head of `stream`, whose hash (`String`'s, so names Swift holds equal are one stream, as in
    /// every other table of the store) is `hash`.
    func value(for stream: String, hash: Int) -> StreamTable.Head? {
        if mayOverflow(stream), let head = overflow[stream] { return head }
        guard !slots.isEmpty else { return nil }
        let slot = slots[self.slot(of: stream, hash: hash)]
        guard slot.name != Slot.empty.name else { return nil }
        return StreamTable.Head(version: version(of: slot), tail: Location(packed: slot.tail))
    }

    private func version(of slot: Slot) -> UInt64 {
        let version = slot.versionAndTag >> 8
        return version == Slot.largeVersion ? largeVersions[slot.name] ?? 0 : UInt64(version)
    }

    /// Sets the head of `stream`, whose hash is `hash`; returns whether the stream is new.
    mutating func update(_ head: StreamTable.Head, for stream: String, hash: Int) -> Bool {
        if mayOverflow(stream), overflow[stream] != nil {
            overflow[stream] = head
            return false
        }
        if (used + 1) * 8 > slots.count * 7 { grow() }
        let index = slot(of: stream, hash: hash)
        var slot = slots[index]
        let added = slot.name == Slot.empty.name
        if added {
            var name = stream
            guard let place = name.withUTF8({ names.add($0) }) else {
                overflow[stream] = head
                return true
            }
            slot.name = place
            used += 1
        } else if slot.versionAndTag >> 8 == Slot.largeVersion {
            largeVersions[slot.name] = nil
        }
        slot.tail = head.tail.packed
        if head.version < UInt64(Slot.largeVersion) {
            slot.versionAndTag = UInt32(head.version) << 8 | Self.tag(hash)
        } else {
            slot.versionAndTag = Slot.largeVersion << 8 | Self.tag(hash)
            largeVersions[slot.name] = head.version
        }
        slots[index] = slot
        return added
    }

    /// Calls `body` with every name and its head, in no particular order.
    func forEveryName<Failure: Error>(_ body: (String, StreamTable.Head) throws(Failure) -> Void) throws(Failure) {
        for slot in slots where slot.name != Slot.empty.name {
            try body(
                names.withName(at: slot.name) { String(decoding: $0, as: UTF8.self) },
                StreamTable.Head(version: version(of: slot), tail: Location(packed: slot.tail))
            )
        }
        for (name, head) in overflow { try body(name, head) }
    }

    /// Makes an empty table large enough for `names` names below its fill limit, each shard's size set
    /// apart from the others' as its first capacity is (so they still do not all grow at once).
    mutating func reserve(_ names: Int) {
        guard slots.isEmpty, names > 0 else { return }
        let capacity = (names * 8 / 7 + 1) * initialCapacity / 16
        slots = Array(repeating: .empty, count: max(initialCapacity, capacity))
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: .empty, count: max(initialCapacity, old.count + old.count / 4))
        for slot in old where slot.name != Slot.empty.name {
            var index = home(names.withName(at: slot.name) { String(decoding: $0, as: UTF8.self).hashValue })
            while slots[index].name != Slot.empty.name { index = next(index) }
            slots[index] = slot
        }
    }
}

/// Names kept once each, back to back in chunks of up to 64 KiB, each after its length (one byte below
/// 128, two up to 32,767); a name's place is its chunk (bits 16-30) and its offset in it. A chunk grows
/// by doubling up to 64 KiB and is never copied after; the next chunk starts when a name does not fit
/// in the room left, so a chunk's unused end is shorter than the name that came next.
///
/// A name that is a decimal number below 2^31 - 1 without leading zeros (`"0"`, `"42"`, `"123456"`: the
/// stream name of an integer id, by default) takes no room in a chunk: its place is the number itself,
/// with the top bit set. A million such names would otherwise take about 7 MB.
struct NameArena: Sendable {
    static let chunkSize = 1 << 16
    static let longestName = 0x7FFF
    private static let number: UInt32 = 1 << 31

    private var chunks: [[UInt8]] = []
    /// The most chunks kept (at most 32,767, so a place's top bit stays clear).
    private let chunkLimit: Int

    /// An empty arena of at most `chunkLimit` chunks (fewer only in tests).
    init(chunkLimit: Int = 0x7FFF) {
        self.chunkLimit = min(max(chunkLimit, 1), 0x7FFF)
    }

    /// Whether every chunk is taken: a name that does not fit in the last one is refused.
    var isFull: Bool { chunks.count >= chunkLimit }

    /// The value of `name` if it is a decimal number kept in its place (see the type's comment).
    private static func number(_ name: UnsafeBufferPointer<UInt8>) -> UInt32? {
        guard !name.isEmpty, name.count <= 10, name[0] != UInt8(ascii: "0") || name.count == 1 else { return nil }
        var value: UInt64 = 0
        for byte in name {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
        }
        // All ones is an empty slot's place: the largest number kept is one less.
        return value < UInt64(~number) ? UInt32(value) : nil
    }

    /// Keeps `name`; its place, or `nil` if the arena cannot hold it (longer than ``longestName`` bytes,
    /// or every chunk full).
    mutating func add(_ name: UnsafeBufferPointer<UInt8>) -> UInt32? {
        if let number = Self.number(name) { return Self.number | number }
        guard name.count <= Self.longestName else { return nil }
        let length = name.count < 0x80 ? 1 : 2
        let needed = length + name.count
        if chunks.isEmpty || chunks[chunks.count - 1].count + needed > Self.chunkSize {
            guard !isFull else { return nil }
            chunks.append([])
        }
        let last = chunks.count - 1
        let offset = chunks[last].count
        if offset + needed > chunks[last].capacity {
            chunks[last].reserveCapacity(min(Self.chunkSize, max(offset + needed, 2 * chunks[last].capacity, 256)))
        }
        if length == 1 {
            chunks[last].append(UInt8(name.count))
        } else {
            chunks[last].append(UInt8(0x80 | name.count >> 8))
            chunks[last].append(UInt8(name.count & 0xFF))
        }
        chunks[last].append(contentsOf: name)
        return UInt32(last) << 16 | UInt32(offset)
    }

    /// Calls `body` with the bytes of the name at `place`.
    func withName<Result>(at place: UInt32, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        if place & Self.number != 0 {
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 10) { digits in
                var value = place & ~Self.number
                var start = digits.count
                repeat {
                    start -= 1
                    digits[start] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                } while value > 0
                return body(UnsafeBufferPointer(rebasing: digits[start...]))
            }
        }
        return chunks[Int(place >> 16)].withUnsafeBufferPointer { chunk in
            let offset = Int(place & 0xFFFF)
            let first = Int(chunk[offset])
            let (length, start) =
                first < 0x80 ? (first, offset + 1) : ((first & 0x7F) << 8 | Int(chunk[offset + 1]), offset + 2)
            return body(UnsafeBufferPointer(rebasing: chunk[start..<start + length]))
        }
    }

    /// Whether the name at `place` is `name`: the same bytes, or the same text as Swift compares strings
    /// (`"é"` as one scalar or as `e` and an accent), as every other table of the store keys streams.
    func holds(_ name: UnsafeBufferPointer<UInt8>, at place: UInt32) -> Bool {
        // A decimal number is ASCII digits, which no other text is canonically equivalent to.
        if place & Self.number != 0 { return Self.number(name) == place & ~Self.number }
        return withName(at: place) { kept in
            if kept.count == name.count && kept.elementsEqual(name) { return true }
            guard kept.contains(where: { $0 >= 0x80 }) || name.contains(where: { $0 >= 0x80 }) else { return false }
            return String(decoding: kept, as: UTF8.self) == String(decoding: name, as: UTF8.self)
        }
    }
}
