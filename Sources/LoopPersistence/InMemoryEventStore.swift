internal import LoopRuntime

/// An event store in memory, for tests and for loops whose history need not outlive the process.
/// It passes the same conformance suite as the durable stores.
public final class InMemoryEventStore: EventStore {
    private struct Contents {
        var streams: [String: [[UInt8]]] = [:]
        var snapshots: [String: Snapshot] = [:]
    }

    private let contents = Locked(Contents())

    /// Creates an empty store.
    public init() {}

    /// See ``EventStore/append(_:to:expecting:)``.
    public func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64
    ) async throws
        -> UInt64
    {
        try contents.withLock { contents in
            let events = contents.streams[stream] ?? []
            let actual = UInt64(events.count)
            guard actual == expectedVersion else {
                throw EventStoreError(.versionConflict(expected: expectedVersion, actual: actual), stream: stream)
            }
            contents.streams[stream, default: []].append(contentsOf: payloads)
            return actual + UInt64(payloads.count)
        }
    }

    /// See ``EventStore/read(_:after:limit:)``.
    public func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent] {
        contents.withLock { contents in
            let events = contents.streams[stream] ?? []
            guard version < UInt64(events.count), limit > 0 else { return [] }
            let start = Int(version)
            let end = start + min(limit, events.count - start)
            return (start..<end).map { StoredEvent(stream: stream, version: UInt64($0 + 1), payload: events[$0]) }
        }
    }

    /// See ``EventStore/version(of:)``.
    public func version(of stream: String) async throws -> UInt64 {
        contents.withLock { UInt64($0.streams[stream]?.count ?? 0) }
    }

    /// See ``EventStore/save(_:)``.
    public func save(_ snapshot: Snapshot) async throws {
        try contents.withLock { contents in
            let version = UInt64(contents.streams[snapshot.stream]?.count ?? 0)
            guard snapshot.version <= version else {
                throw EventStoreError(
                    .invalid(reason: "snapshot at version \(snapshot.version) is past the stream's \(version)"),
                    stream: snapshot.stream
                )
            }
            if let saved = contents.snapshots[snapshot.stream], saved.version > snapshot.version { return }
            contents.snapshots[snapshot.stream] = snapshot
        }
    }

    /// See ``EventStore/latestSnapshot(of:)``.
    public func latestSnapshot(of stream: String) async throws -> Snapshot? {
        contents.withLock { $0.snapshots[stream] }
    }
}
