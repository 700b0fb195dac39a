/// Turns values (events, states) into bytes for an ``EventStore`` and back.
///
/// Decoding failures are ``CodecError`` values that say what did not decode, in words a reader can act
/// on; a store adds the stream and version.
public protocol EventCodec<Value>: Sendable {
    /// The values it encodes.
    associatedtype Value

    /// The bytes of `value`.
    func encode(_ value: Value) throws -> [UInt8]

    /// The value `bytes` encode.
    func decode(_ bytes: [UInt8]) throws -> Value
}

/// A value that did not encode or decode, and why.
public struct CodecError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was being done and what went wrong, in words.
    public var description: String

    /// Creates an error saying `description`.
    public init(_ description: String) {
        self.description = description
    }
}
