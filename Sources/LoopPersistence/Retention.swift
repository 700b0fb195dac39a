/// Which events a store keeps: every one, or only those a recovery can still need, the events after a
/// stream's latest snapshots.
///
/// ```swift
/// // Keep the latest two snapshots of each stream and the events after the older of them.
/// let store = try FileEventStore(directory: path, options: .init(retention: .afterSnapshots(2)))
/// ```
///
/// A stream with fewer snapshots than the policy names keeps every event. Reading events a policy no
/// longer keeps (`read(_:after:limit:)` from below the oldest kept snapshot) fails with
/// ``EventStoreError/Kind/invalid(reason:)``, whether or not they were removed yet: what a read returns
/// does not depend on when compaction ran. Keeping two snapshots rather than one leaves a recovery an
/// older snapshot and its events to fall back on should the latest stop decoding.
public enum Retention: Hashable, Sendable, CustomStringConvertible {
    /// Every event stays (the default).
    case keepAll
    /// Each stream keeps its latest `count` snapshots and the events after the oldest of them; older
    /// events and snapshots go (`count` below 1 counts as 1).
    case afterSnapshots(Int)

    /// How many snapshots of a stream the index tracks: the latest one, or the latest `count`.
    package var trackedSnapshots: Int {
        switch self {
        case .keepAll: 1
        case .afterSnapshots(let count): max(1, count)
        }
    }

    /// The `count` of ``afterSnapshots(_:)``, or 0 when everything is kept.
    package var keptSnapshots: Int {
        switch self {
        case .keepAll: 0
        case .afterSnapshots(let count): max(1, count)
        }
    }

    /// The policy in words.
    public var description: String {
        switch self {
        case .keepAll: "keep every event"
        case .afterSnapshots(let count): "keep the events after the latest \(max(1, count)) snapshots"
        }
    }
}
