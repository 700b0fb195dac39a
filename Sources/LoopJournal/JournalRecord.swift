/// One line of a journal: an event with its sequence number, and sometimes a digest of the state the
/// event led to.
///
/// In the file it is one JSON object per line: `{"seq":42,"event":{…}}`, with `"digest":"…"` every N
/// events.
public struct JournalRecord<Event> {
    /// The event's position among the processed events, from 1.
    public var sequence: Int
    /// The event, as the update processed it.
    public var event: Event
    /// ``StateDigest`` of the state after the event, on every Nth record.
    public var digest: String?

    /// Creates a record.
    public init(sequence: Int, event: Event, digest: String? = nil) {
        self.sequence = sequence
        self.event = event
        self.digest = digest
    }
}

extension JournalRecord: Equatable where Event: Equatable {}
extension JournalRecord: Sendable where Event: Sendable {}

extension JournalRecord: Codable where Event: Codable {
    private enum CodingKeys: String, CodingKey {
        case sequence = "seq"
        case event
        case digest
    }
}
