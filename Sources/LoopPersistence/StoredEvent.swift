/// One event as an event store keeps it: its stream, its position in the stream, and its encoded bytes.
public struct StoredEvent: Hashable, Sendable {
    /// The stream it belongs to.
    public var stream: String
    /// Its position in the stream: the first event is version 1, and versions have no gaps.
    public var version: UInt64
    /// The encoded event (see ``EventCodec``).
    public var payload: [UInt8]

    /// Creates a stored event.
    public init(stream: String, version: UInt64, payload: [UInt8]) {
        self.stream = stream
        self.version = version
        self.payload = payload
    }
}

/// The state of a stream folded up to `version`, encoded, so recovery replays only the events after it.
public struct Snapshot: Hashable, Sendable {
    /// The stream it summarises.
    public var stream: String
    /// The version of the last event folded into it.
    public var version: UInt64
    /// The encoded state.
    public var payload: [UInt8]

    /// Creates a snapshot.
    public init(stream: String, version: UInt64, payload: [UInt8]) {
        self.stream = stream
        self.version = version
        self.payload = payload
    }
}
