/// Where a durable loop keeps its events: streams of encoded events, each named by a string, appended
/// to with optimistic concurrency, read back in order, with the latest snapshot of each.
///
/// A stream's name is compared as Swift compares strings: two spellings of one text (`"é"` as one
/// scalar, or as `e` and a combining accent) name one stream, as they are one key of a dictionary.
///
/// The store deals in bytes; an ``EventCodec`` turns events and states into them. Every store passes
/// the same conformance suite (`EventStoreConformance` in LoopTesting): order, conflicts, concurrent
/// writers, reads during writes, snapshots, and paged reads that keep memory bounded.
///
/// ```swift
/// let store = InMemoryEventStore()
/// let version = try await store.append([payload], to: "order-17", expecting: 0)   // 1
/// for try await event in store.events(of: "order-17") { ... }
/// ```
public protocol EventStore: Sendable {
    /// Appends `payloads`, in order, to `stream`, which must be at `expectedVersion` (0 for a stream
    /// with no events). Returns the stream's new version (unchanged for an empty batch). All or nothing:
    /// on any error nothing of the batch is stored, and a version conflict is ``EventStoreError/Kind/versionConflict(expected:actual:)``,
    /// never an overwrite.
    func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64
    ) async throws
        -> UInt64

    /// At most `limit` events of `stream` after `version`, in version order (fewer at the end of the
    /// stream; none past it). The building block of ``events(of:after:pageSize:)``.
    func read(_ stream: String, after version: UInt64, limit: Int) async throws -> [StoredEvent]

    /// The version of the last event of `stream`: 0 for a stream with no events.
    func version(of stream: String) async throws -> UInt64

    /// Saves `snapshot` as the latest of its stream, unless a snapshot at a later version is already
    /// saved. Its version must not be past the stream's.
    func save(_ snapshot: Snapshot) async throws

    /// The latest snapshot of `stream`, if any.
    func latestSnapshot(of stream: String) async throws -> Snapshot?
}

extension EventStore {
    /// The events of `stream` after `version`, in order, read `pageSize` at a time: memory stays at one
    /// page however long the stream is. The sequence ends at the first page that comes back short, so
    /// events appended while iterating are read until the reader catches up with the writer.
    public func events(of stream: String, after version: UInt64 = 0, pageSize: Int = 1_024) -> StoredEvents {
        StoredEvents(store: self, stream: stream, after: version, pageSize: max(1, pageSize))
    }
}

/// The events of one stream, read page by page from a store. See ``EventStore/events(of:after:pageSize:)``.
public struct StoredEvents: AsyncSequence, Sendable {
    /// One stored event.
    public typealias Element = StoredEvent

    let store: any EventStore
    let stream: String
    let after: UInt64
    let pageSize: Int

    /// Starts reading.
    public func makeAsyncIterator() -> Iterator {
        Iterator(store: store, stream: stream, next: after, pageSize: pageSize)
    }

    /// A position in the stream.
    public struct Iterator: AsyncIteratorProtocol {
        let store: any EventStore
        let stream: String
        var next: UInt64
        let pageSize: Int
        var page: [StoredEvent] = []
        var index = 0
        var ended = false

        /// The next event, or `nil` at the end of the stream.
        public mutating func next() async throws -> StoredEvent? {
            if index == page.count {
                guard !ended else { return nil }
                page = try await store.read(stream, after: next, limit: pageSize)
                index = 0
                if page.count > pageSize {
                    throw EventStoreError(
                        .corrupted(
                            location: "a page after version \(next)",
                            reason: "\(page.count) events where at most \(pageSize) were asked for"
                        ),
                        stream: stream
                    )
                }
                if page.count < pageSize { ended = true }
                guard !page.isEmpty else { return nil }
            }
            let event = page[index]
            // A store that repeats or skips a version would make this loop forever or lose events.
            guard event.version == next + 1 else {
                throw EventStoreError(
                    .corrupted(location: "version \(event.version)", reason: "expected version \(next + 1)"),
                    stream: stream
                )
            }
            index += 1
            next = event.version
            return event
        }
    }
}

/// A store that appends without a task waiting for it: it calls back, from its own thread, once the
/// events are durable. A durable loop on such a store starts its appends inline and holds no task per
/// append in flight.
@usableFromInline
package protocol AppendingWithCompletion: EventStore {
    /// Appends as ``EventStore/append(_:to:expecting:)`` does, and calls `completion` once with what
    /// that would return or throw.
    func append(
        _ payloads: [[UInt8]],
        to stream: String,
        expecting expectedVersion: UInt64,
        then completion: @escaping @Sendable (Result<UInt64, EventStoreError>) -> Void
    )
}
