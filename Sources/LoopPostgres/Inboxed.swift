public import LoopPersistence

/// An event of a cluster's entity, with the inbox row it came from (`nil` for one its own effects
/// sent). What a node's durable loops store: the row's id goes with the event into the events table.
public struct Inboxed<Event: Sendable>: Sendable {
    /// The inbox row, or `nil` for feedback from the entity's own effects.
    public var inboxRow: Int64?
    /// The event.
    public var event: Event {
        didSet { received = nil }
    }
    /// The bytes the event was decoded from, in the cluster's codec, when it came from an inbox row: the
    /// store records them as they came instead of encoding the event again (a node's events are
    /// decoded once and never re-encoded). Forgotten when `event` is changed.
    var received: [UInt8]?

    /// Wraps `event`.
    public init(inboxRow: Int64?, event: Event) {
        self.inboxRow = inboxRow
        self.event = event
    }

    /// Wraps `event`, decoded from `received` (the inbox row's payload).
    init(inboxRow: Int64, event: Event, received: [UInt8]) {
        self.inboxRow = inboxRow
        self.event = event
        self.received = received
    }
}

/// Encodes an ``Inboxed`` event as its inbox row's id (a marker byte, then 8 bytes) followed by the
/// event in `base`'s encoding, so the store can read the id without decoding the event.
public struct InboxedCodec<Event: Sendable>: EventCodec {
    /// The events' own codec.
    public let base: any EventCodec<Event>

    /// A codec wrapping `base`.
    public init(_ base: some EventCodec<Event>) {
        self.base = base
    }

    /// The marker byte, then the id's 8 bytes (big-endian) if there is one, then the event's bytes (as
    /// they came from the inbox row, if they did).
    public func encode(_ value: Inboxed<Event>) throws -> [UInt8] {
        let event = try value.received ?? base.encode(value.event)
        guard let inbox = value.inboxRow else { return [0] + event }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(9 + event.count)
        bytes.append(1)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: inbox >> shift)) }
        bytes.append(contentsOf: event)
        return bytes
    }

    /// The event and its inbox row's id; a ``/LoopPersistence/CodecError`` for bytes it did not make.
    public func decode(_ bytes: [UInt8]) throws -> Inboxed<Event> {
        guard let marker = bytes.first, marker <= 1, marker == 0 || bytes.count >= 9 else {
            throw CodecError(
                "not an inboxed event: \(bytes.count) bytes starting with \(bytes.first.map { "\($0)" } ?? "nothing")"
            )
        }
        let header = marker == 0 ? 1 : 9
        return Inboxed(inboxRow: Self.inboxRow(of: bytes), event: try base.decode(Array(bytes[header...])))
    }

    /// The inbox row's id in `bytes`, if they carry one; reads nothing else.
    @Sendable
    public static func inboxRow(of bytes: [UInt8]) -> Int64? {
        guard bytes.count >= 9, bytes[0] == 1 else { return nil }
        return bytes[1...8].reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }
}
