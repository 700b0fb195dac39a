#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Why an event store refused or failed an operation: a value, never a crash.
public struct EventStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: Hashable, Sendable {
        /// The stream was not at the version the append expected: another writer got there first.
        /// Nothing was written.
        case versionConflict(expected: UInt64, actual: UInt64)
        /// The stored data is damaged where the store can name it (a file and an offset, say).
        case corrupted(location: String, reason: String)
        /// A read or write failed (`errno`-style code and what was being done). Nothing partial stays.
        case io(code: Int32, operation: String)
        /// The store is closed, or another process holds it.
        case unavailable(reason: String)
        /// An argument the caller controls is not acceptable (a snapshot past the end of its stream, say).
        case invalid(reason: String)
        /// The writer no longer owns the stream (a cluster node that lost the stream's shard to another):
        /// nothing was written, and the writer must leave the stream to its owner.
        case fenced(reason: String)
    }

    /// The stream concerned, if one.
    public var stream: String?
    /// What went wrong.
    public var kind: Kind

    /// Creates an error about `stream`.
    public init(_ kind: Kind, stream: String? = nil) {
        self.kind = kind
        self.stream = stream
    }

    /// A sentence naming the stream and what went wrong.
    public var description: String {
        let subject = stream.map { "stream '\($0)': " } ?? ""
        switch kind {
        case .versionConflict(let expected, let actual):
            return subject + "version conflict: expected version \(expected), the stream is at \(actual)"
        case .corrupted(let location, let reason):
            return subject + "corrupted data at \(location): \(reason)"
        case .io(let code, let operation):
            return subject + "cannot \(operation): \(Self.describe(errno: code)) (errno \(code))"
        case .unavailable(let reason):
            return subject + "store unavailable: \(reason)"
        case .invalid(let reason):
            return subject + "invalid request: \(reason)"
        case .fenced(let reason):
            return subject + "fenced: \(reason)"
        }
    }
}

extension EventStoreError {
    /// The system's words for `code` (`strerror`): "No space left on device".
    static func describe(errno code: Int32) -> String {
        // glibc's strerror returns a constant string for known codes, and a thread-local one otherwise.
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }
}
