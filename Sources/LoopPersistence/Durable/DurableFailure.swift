/// Why a durable loop (or one entity of a group) stopped: a value a caller can switch on, never words
/// to compare. Its ``description`` is the sentence an operator reads.
public struct DurableFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// What failed.
    public enum Kind: Hashable, Sendable {
        /// The store refused or failed an operation (the version check, the disk, a lost shard).
        case store(EventStoreError)
        /// A store that is not one of EffectLoop's failed with an error of its own: its words, which
        /// name the stream if the store's do.
        case storeError(String)
        /// A recorded event or snapshot does not decode: the stored bytes are damaged, or they were
        /// written by a program whose types have changed since.
        case undecodable(Record, version: UInt64, reason: String)
        /// An event the program produced does not encode: nothing of its batch was written.
        case unencodable(reason: String)
        /// A group has no program for the stream.
        case noProgram
        /// The record at `version` was decided by program revision `revision`, which the running program
        /// (revision `running`) does not replay (``DurableProgram/replaying(revision:with:)``): recovering
        /// would re-decide it with other code. Nothing of the stream changes.
        case unknownRevision(UInt32, version: UInt64, running: UInt32)
    }

    /// Which kind of record did not decode.
    public enum Record: String, Hashable, Sendable {
        case event
        case snapshot
    }

    /// The stream concerned.
    public var stream: String
    /// What failed.
    public var kind: Kind
    /// Whether it happened while the stream was being read back.
    public var whileRecovering: Bool

    /// Creates a failure of `stream`.
    public init(_ kind: Kind, stream: String, whileRecovering: Bool = false) {
        self.kind = kind
        self.stream = stream
        self.whileRecovering = whileRecovering
    }

    /// The failure an error thrown by a store gives: typed when it is an ``EventStoreError``.
    public init(storeError error: any Error, stream: String, whileRecovering: Bool = false) {
        let kind: Kind = (error as? EventStoreError).map { .store($0) } ?? .storeError("\(error)")
        self.init(kind, stream: stream, whileRecovering: whileRecovering)
    }

    /// Whether recorded data does not decode (damage, or a changed program): what `sysexits` calls a data
    /// error (65), as opposed to a failure of the store itself (74).
    public var isUndecodable: Bool {
        if case .undecodable = kind { true } else { false }
    }

    /// Whether the store found its data damaged (``EventStoreError/Kind/corrupted(location:reason:)``):
    /// a data error too, as ``isUndecodable``.
    public var isCorruption: Bool {
        guard case .store(let error) = kind, case .corrupted = error.kind else { return false }
        return true
    }

    /// Whether another writer owns the stream now: the store fenced the append, or found the stream at
    /// a version the loop did not write.
    public var isFenced: Bool {
        guard case .store(let error) = kind else { return false }
        switch error.kind {
        case .fenced, .versionConflict: return true
        default: return false
        }
    }

    /// A sentence naming the stream and what failed.
    public var description: String {
        switch kind {
        case .store(let error):
            whileRecovering ? "cannot recover stream '\(stream)': \(error)" : "\(error)"
        case .storeError(let reason):
            whileRecovering ? "cannot recover stream '\(stream)': \(reason)" : reason
        case .undecodable(let record, let version, let reason):
            "stream '\(stream)': the \(record.rawValue) at version \(version) does not decode: \(reason)"
        case .unencodable(let reason):
            "stream '\(stream)': cannot encode an event: \(reason)"
        case .noProgram:
            "stream '\(stream)': no program to recover it"
        case .unknownRevision(let revision, let version, let running):
            "stream '\(stream)': the event at version \(version) was decided by revision \(revision) of the program, "
                + "and revision \(running) does not replay that revision's events: add its update with "
                + "replaying(revision: \(revision), with:), or run the release that wrote it"
        }
    }
}
