/// Why a PostgreSQL operation failed: a value with the server's SQLSTATE when it sent one, never a crash.
public struct PostgresError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure it is.
    public enum Kind: Hashable, Sendable {
        /// No connection could be made, or the connection broke.
        case connection
        /// The server refused a statement (see ``sqlState``).
        case statement
        /// The server's answer was not what the statement should return.
        case protocolViolation
    }

    /// What kind of failure it is.
    public var kind: Kind
    /// The five-character SQLSTATE code the server sent (`23505` for a unique violation), if any.
    public var sqlState: String?
    /// The server's or libpq's message.
    public var message: String

    /// Creates an error.
    public init(_ kind: Kind, sqlState: String? = nil, message: String) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
    }

    /// Whether the statement broke a unique constraint (SQLSTATE 23505).
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// Whether the server gave up on the transaction for a conflict it asks the client to retry
    /// (serialization failure or deadlock).
    public var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// A sentence saying what failed.
    public var description: String {
        let code = sqlState.map { " [\($0)]" } ?? ""
        switch kind {
        case .connection: return "postgres connection failed\(code): \(message)"
        case .statement: return "postgres statement failed\(code): \(message)"
        case .protocolViolation: return "unexpected answer from postgres: \(message)"
        }
    }
}
