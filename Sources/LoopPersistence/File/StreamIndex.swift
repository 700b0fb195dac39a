/// What the file store keeps in memory for one stream: its version, where its last events record is,
/// its latest snapshot, and a sparse list of checkpoints (one per ``StreamIndex/checkpointInterval``
/// versions) so a read starts near the events it wants instead of at the end of the stream.
///
/// Each events record points back to the stream's previous one, so reading walks that chain from the
/// first checkpoint after the page; memory per stream is a few words plus 16 bytes per
/// ``StreamIndex/checkpointInterval`` events, not a position per event.
struct StreamEntry {
    /// The first version of an events record, and where it is.
    struct Checkpoint {
        var first: UInt64
        var location: Location
    }

    var version: UInt64 = 0
    var tail: Location = .none
    var snapshot: Location = .none
    var snapshotVersion: UInt64 = 0
    var checkpoints: [Checkpoint] = []

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
