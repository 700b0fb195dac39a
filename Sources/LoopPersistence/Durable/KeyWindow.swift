public import EffectHandlers
public import LoopCore
internal import LoopRuntime

/// The callers' keys an entity has recorded, newest last, at most ``capacity`` of them: what makes a
/// repeat of a keyed `send`, `sendDurably` or `request` harmless. A key in the window is not applied
/// again; a repeat gets the first try's version and, for a request, its recorded answer.
///
/// The window is kept by the durable loop, not in the program's state: it is recorded with the events
/// (each keyed event carries its key, each answer is recorded with the event that decided it) and
/// carried by snapshots, so it is the same after a restart or passivation. A key older than the last
/// `capacity` keys of its entity is forgotten: a repeat of it is applied as a new event.
public struct KeyWindow: Sendable, Equatable {
    /// What the window remembers of one key.
    public struct Entry: Sendable, Hashable {
        /// The caller's key.
        public var key: String
        /// The version of the event recorded under it.
        public var version: UInt64
        /// A digest of the event's encoding: a repeat must send the same event.
        public var fingerprint: UInt64
        /// The id of the request's reply address (0 for a key without a request).
        public var reply: UInt64
        /// The answer the program decided for the request, and the version of the event that decided
        /// it; `nil` while no answer is decided.
        public var answer: RecordedAnswer?

        /// Creates an entry.
        public init(key: String, version: UInt64, fingerprint: UInt64, reply: UInt64, answer: RecordedAnswer? = nil) {
            self.key = key
            self.version = version
            self.fingerprint = fingerprint
            self.reply = reply
            self.answer = answer
        }
    }

    /// How many keys the window keeps; the oldest go first.
    public let capacity: Int
    /// The keys, once there is one: a window costs one word while empty, as most entities' are.
    private var storage: Storage?

    /// The entries, copied on write.
    // @unchecked Sendable: a Storage is mutated only through `mutableStorage()`, which copies it unless
    // this window holds the only reference; so an instance another value (or thread) can see is never
    // mutated, and sharing it is sharing an immutable value.
    private final class Storage: @unchecked Sendable {
        var entries: [String: Entry] = [:]
        var byReply: [UInt64: String] = [:]
        var order = Queue<String>()

        init() {}

        init(copying other: Storage) {
            entries = other.entries
            byReply = other.byReply
            order = other.order
        }
    }

    /// An empty window keeping at most `capacity` keys (at least 1).
    public init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// A window of `capacity` holding `entries`, oldest first (the newest `capacity` of them).
    public init(capacity: Int, entries: [Entry]) {
        self.init(capacity: capacity)
        for entry in entries { insert(entry) }
    }

    private mutating func mutableStorage() -> Storage {
        // The uniqueness check first, holding no other reference (one held would make it always fail).
        if !isKnownUniquelyReferenced(&storage) {
            storage = storage.map(Storage.init(copying:)) ?? Storage()
        }
        return storage ?? Storage()
    }

    /// How many keys it holds.
    public var count: Int { storage?.entries.count ?? 0 }

    /// The entries, oldest first.
    public var all: [Entry] {
        guard let storage else { return [] }
        return storage.order.elements.compactMap { storage.entries[$0] }
    }

    /// The entry of `key`, if the window has it.
    public subscript(key: String) -> Entry? { storage?.entries[key] }

    /// The entry whose request has the reply address `reply`, if the window has it.
    public func entry(replying reply: UInt64) -> Entry? {
        storage?.byReply[reply].flatMap { storage?.entries[$0] }
    }

    /// Adds `entry` (its key must be new), forgetting the oldest keys past the capacity.
    public mutating func insert(_ entry: Entry) {
        guard self[entry.key] == nil else { return }
        let storage = mutableStorage()
        storage.entries[entry.key] = entry
        if entry.reply != 0 { storage.byReply[entry.reply] = entry.key }
        storage.order.append(entry.key)
        while storage.entries.count > capacity, let oldest = storage.order.popFirst() {
            if let gone = storage.entries.removeValue(forKey: oldest), gone.reply != 0 {
                storage.byReply[gone.reply] = nil
            }
        }
    }

    /// Records the answer to the request with the reply address `reply`; `false` if the window has no
    /// such request or it has its answer already.
    public mutating func answer(_ reply: UInt64, with answer: RecordedAnswer) -> Bool {
        if case .recorded = self.answer(reply, with: { answer }) { return true }
        return false
    }

    /// What became of an answer to record.
    @usableFromInline
    enum Answering {
        /// Recorded, as this.
        case recorded(RecordedAnswer)
        /// The request had its answer already.
        case answeredBefore
        /// No key in the window has this reply address.
        case noKey
    }

    /// Records the answer `make` makes to the request with the reply address `reply`, unless the window
    /// has no such request or it has its answer already: ``answer(_:with:)`` looking each up once.
    @usableFromInline
    mutating func answer(_ reply: UInt64, with make: () -> RecordedAnswer) -> Answering {
        guard let key = storage?.byReply[reply] else { return .noKey }
        let storage = mutableStorage()
        guard let index = storage.entries.index(forKey: key) else { return .noKey }
        guard storage.entries.values[index].answer == nil else { return .answeredBefore }
        let answer = make()
        storage.entries.values[index].answer = answer
        return .recorded(answer)
    }

    /// Equal when they keep the same capacity and the same entries in the same order.
    public static func == (lhs: KeyWindow, rhs: KeyWindow) -> Bool {
        lhs.capacity == rhs.capacity && lhs.all == rhs.all
    }
}

/// An answer recorded with the event that decided it: the program's reply value, encoded with the
/// program's answer codec, or why it could not be encoded.
public struct RecordedAnswer: Sendable, Hashable {
    /// The id of the reply address it answers.
    public var reply: UInt64
    /// The version of the event that decided it.
    public var version: UInt64
    /// The encoded value, or why it did not encode.
    public var payload: Result<[UInt8], CodecError>

    /// Creates a recorded answer.
    public init(reply: UInt64, version: UInt64, payload: Result<[UInt8], CodecError>) {
        self.reply = reply
        self.version = version
        self.payload = payload
    }
}

/// What the durable loop records beside one of the program's events: the caller's key it came with,
/// and the answers to keyed requests that it decided.
public struct EventNote: Sendable, Hashable {
    /// The caller's key and what identifies its event, if it came with one.
    public var key: KeyWindow.Entry?
    /// The answers the event decided, to keyed requests.
    public var answers: [RecordedAnswer]
    /// The timers the event started and ended, and those that started since the last record (see
    /// ``DurableProgram/keepingTimers(codec:)``).
    public var timers: TimerNote
    /// The program revision that decided this record and those after it, on the first record a new
    /// revision appends (see ``DurableProgram/revision``); `nil` on the others.
    public var revision: UInt32?

    /// Creates a note.
    public init(
        key: KeyWindow.Entry? = nil,
        answers: [RecordedAnswer] = [],
        timers: TimerNote = TimerNote(),
        revision: UInt32? = nil
    ) {
        self.key = key
        self.answers = answers
        self.timers = timers
        self.revision = revision
    }

    /// Whether there is nothing to record.
    public var isEmpty: Bool { key == nil && answers.isEmpty && timers.isEmpty && revision == nil }
}

extension KeyWindow {
    /// Applies what `note` records of the event at `version`: its key, then its answers.
    @usableFromInline
    mutating func apply(_ note: EventNote) {
        if let key = note.key { insert(key) }
        for answer in note.answers { _ = self.answer(answer.reply, with: answer) }
    }
}

/// A call into a durable loop from outside: an event with what comes with it.
public struct DurableCall<Event> {
    /// The program's event.
    public var event: Event
    /// The caller's key, if it gave one.
    public var key: String?
    /// A digest of the event's encoding, compared between a keyed call and its repeats.
    public var fingerprint: UInt64
    /// The id of the request's reply address, for a request.
    public var reply: UInt64?
    /// The ticket of a sender waiting for the event to be durable.
    public var ticket: UInt64?
    /// What the router's scope captured where the call was made, for the scope around the event's
    /// effects (never recorded).
    public var context: EffectContext

    /// Creates a call.
    public init(
        event: Event,
        key: String? = nil,
        fingerprint: UInt64 = 0,
        reply: UInt64? = nil,
        ticket: UInt64? = nil,
        context: EffectContext = .none
    ) {
        self.event = event
        self.key = key
        self.fingerprint = fingerprint
        self.reply = reply
        self.ticket = ticket
        self.context = context
    }
}

extension DurableCall: Sendable where Event: Sendable {}
extension DurableCall: Equatable where Event: Equatable {}

/// How a durable program's answers to requests are found among its effects: an effect holding a
/// ``/LoopCore/Reply`` is delivered by the durable loop (after its event is recorded), and, for a keyed
/// request, its value is encoded and recorded with the event, so a repeat of the key gets it back.
public struct ReplyRecording<Effect>: Sendable {
    /// An answer found in an effect.
    public struct Found {
        /// The id of the reply address.
        public var reply: UInt64
        /// The reply's value.
        public var value: any Sendable
        /// Encodes the value for the record.
        public var encode: () -> Result<[UInt8], CodecError>
    }

    /// The answer `effect` holds, or `nil` if it is no reply.
    public let find: @Sendable (Effect) -> Found?
    /// The value a recorded answer encodes.
    public let decode: @Sendable ([UInt8]) -> Result<any Sendable, CodecError>

    /// Finds replies with `extract`, encoding their values with `codec`.
    public init<Value: Sendable>(
        _ extract: @escaping @Sendable (Effect) -> Reply<Value>?,
        codec: some EventCodec<Value>
    ) {
        find = { effect in
            guard let reply = extract(effect) else { return nil }
            return Found(reply: reply.to.id, value: reply.value) {
                do {
                    return .success(try codec.encode(reply.value))
                } catch let error as CodecError {
                    return .failure(error)
                } catch {
                    return .failure(CodecError("\(error)"))
                }
            }
        }
        decode = { bytes in
            do {
                return .success(try codec.decode(bytes))
            } catch let error as CodecError {
                return .failure(error)
            } catch {
                return .failure(CodecError("\(error)"))
            }
        }
    }
}

/// A reply on its way to the callers waiting for its address: the value the update decided, or, for a
/// repeat of a key, the one recorded with the first try (`recorded`, its bytes as stored).
///
/// Two deliveries are equal when they go to the same address with the same recorded bytes: the value
/// itself is compared where the program's effect holds it (``DurableEffect/reply(_:stream:delivery:)``).
public struct ReplyDelivery: Sendable, Equatable, CustomStringConvertible {
    /// The id of the reply address.
    public var reply: UInt64
    /// For an answer from the record: the recorded bytes, or why the first answer did not encode.
    public var recorded: Result<[UInt8], CodecError>?
    /// The value to hand over, or why it cannot be had.
    public var value: Result<any Sendable, CodecError>

    /// A delivery of `value` to the reply address `reply`.
    public init(reply: UInt64, value: any Sendable) {
        self.reply = reply
        self.recorded = nil
        self.value = .success(value)
    }

    /// A delivery of the recorded answer `recorded`, decoded by `decode`.
    public init(
        reply: UInt64,
        recorded: Result<[UInt8], CodecError>,
        decode: ([UInt8]) -> Result<any Sendable, CodecError>
    ) {
        self.reply = reply
        self.recorded = recorded
        switch recorded {
        case .success(let bytes): value = decode(bytes)
        case .failure(let error): value = .failure(error)
        }
    }

    /// Equal when they go to the same address with the same recorded bytes.
    public static func == (lhs: ReplyDelivery, rhs: ReplyDelivery) -> Bool {
        lhs.reply == rhs.reply && lhs.recorded == rhs.recorded
    }

    /// `reply #id`, and `(recorded)` for an answer from the record.
    public var description: String { "reply #\(reply)\(recorded == nil ? "" : " (recorded)")" }
}
