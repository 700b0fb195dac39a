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

/// Every stream's entry, kept compact: 16 bytes per stream (its version and last record) in tables
/// split by hash into shards, so growing one never holds two copies of the whole index; snapshots and
/// checkpoints, which most streams of an entity group never have, live in tables of their own.
///
/// Measured on `loop-bench`'s w9 (a million streams of one event each): the compact table is what
/// keeps the peak resident growth near the live loops' (see `Docs/Persistence.md`).
struct StreamTable: Sendable {
    struct Head: Sendable {
        var version: UInt64
        var tail: Location
    }

    static let shardCount = 64

    private var shards = [OpenTable<Head>](
        repeating: OpenTable(empty: Head(version: 0, tail: .none)),
        count: shardCount
    )
    private var snapshots: [String: [StreamEntry.SnapshotRef]] = [:]
    private var checkpoints: [String: [StreamEntry.Checkpoint]] = [:]
    private var chainStarts: [String: Location] = [:]
    private(set) var count = 0

    private static func shard(of stream: String) -> Int {
        stream.hashValue & (shardCount - 1)
    }

    subscript(stream: String) -> StreamEntry? {
        get {
            let head = shards[Self.shard(of: stream)].value(for: stream)
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
            let shard = Self.shard(of: stream)
            // Streams are never removed: a store only grows.
            guard let entry = newValue else { return }
            if shards[shard].update(Head(version: entry.version, tail: entry.tail), for: stream) { count += 1 }
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

    /// Calls `body` with every stream and its entry, in no particular order.
    func forEveryStream<Failure: Error>(_ body: (String, StreamEntry) throws(Failure) -> Void) throws(Failure) {
        for shard in shards {
            try shard.forEveryKey { (stream: String, head: Head) throws(Failure) in
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

/// A hash table of strings with linear probing, filled to at most 7/8 and grown by half: 32 bytes a
/// slot, about 40 per 16-byte value, where a `Dictionary` (filled to at most 3/4, grown by doubling)
/// averages near 60.
struct OpenTable<Value: Sendable>: Sendable {
    private var keys: [String?] = []
    /// The values, by the slot of their key; `empty` where there is no key (not an optional, which
    /// would add a byte and, with alignment, 8 bytes to each slot).
    private var values: [Value] = []
    private let empty: Value
    private var used = 0

    init(empty: Value) {
        self.empty = empty
    }

    /// The slot holding `key`, or the empty slot where it would go.
    private func slot(of key: String, hash: Int) -> Int {
        var index = Int(UInt64(bitPattern: Int64(hash)).multipliedFullWidth(by: UInt64(keys.count)).high)
        while let existing = keys[index], existing != key {
            index += 1
            if index == keys.count { index = 0 }
        }
        return index
    }

    func value(for key: String) -> Value? {
        guard !keys.isEmpty else { return nil }
        let index = slot(of: key, hash: key.hashValue)
        return keys[index] == nil ? nil : values[index]
    }

    /// Sets the value of `key`; returns whether the key is new.
    mutating func update(_ value: Value, for key: String) -> Bool {
        if (used + 1) * 8 > keys.count * 7 { grow() }
        let index = slot(of: key, hash: key.hashValue)
        values[index] = value
        guard keys[index] == nil else { return false }
        keys[index] = key
        used += 1
        return true
    }

    /// Calls `body` with every key and its value, in slot order.
    func forEveryKey<Failure: Error>(_ body: (String, Value) throws(Failure) -> Void) throws(Failure) {
        for (key, value) in zip(keys, values) {
            guard let key else { continue }
            try body(key, value)
        }
    }

    private mutating func grow() {
        let oldKeys = keys
        let oldValues = values
        let capacity = max(16, keys.count + keys.count / 2)
        keys = Array(repeating: nil, count: capacity)
        values = Array(repeating: empty, count: capacity)
        for (key, value) in zip(oldKeys, oldValues) {
            guard let key else { continue }
            let index = slot(of: key, hash: key.hashValue)
            keys[index] = key
            values[index] = value
        }
    }
}
