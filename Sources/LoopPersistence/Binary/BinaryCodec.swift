/// The default codec of durable loops: a compact binary form of any `Codable` value, several times
/// faster to encode and decode than JSON (see `Docs/Persistence.md` for the measurement), with no
/// Foundation.
///
/// The form keeps the keys (so a decoder finds fields by name, in any order, and a field added later
/// as an optional decodes as absent) and tags every value with its kind, so bytes that do not match
/// the type fail with an error naming the path, never a crash:
///
/// ```
/// value   := tag payload
/// 0 nil · 1 false · 2 true · 3 signed varint (zigzag) · 4 unsigned varint · 5 Double (8 bytes LE)
/// 6 Float (4 bytes LE) · 7 string (varint length, UTF-8)
/// 8 keyed   (varint body length, varint count, count x (varint key length, key UTF-8, value))
/// 9 unkeyed (varint body length, varint count, count x value)
/// ```
public struct BinaryCodec<Value: Codable>: EventCodec {
    /// Creates a codec.
    public init() {}

    /// The bytes of `value`.
    public func encode(_ value: Value) throws -> [UInt8] {
        if let bytes = BinaryStreaming.bytes(of: value) { return bytes }
        return try Self.encodeAsTree(value)
    }

    /// The bytes of `value` built as a tree first: what ``encode(_:)`` falls back to when `value` uses
    /// its containers out of order (and how the tests check that the fast path writes the same bytes).
    package static func encodeAsTree(_ value: Value) throws -> [UInt8] {
        let encoder = BinaryEncoding.Encoder(path: [])
        do {
            try value.encode(to: encoder)
        } catch {
            throw CodecError("cannot encode \(Value.self): \(CodingErrors.describe(error))")
        }
        let node = encoder.slot.node
        var bytes: [UInt8] = []
        bytes.reserveCapacity(node.size)
        node.write(to: &bytes)
        return bytes
    }

    /// The value `bytes` hold.
    public func decode(_ bytes: [UInt8]) throws -> Value {
        do {
            let decoder = BinaryDecoding.Decoder(bytes: bytes, offset: 0, path: [])
            let value = try Value(from: decoder)
            var reader = BinaryDecoding.Reader(bytes: bytes, position: 0, path: [])
            let end = try reader.skipValue()
            guard end == bytes.count else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: [], debugDescription: "\(bytes.count - end) bytes after the value")
                )
            }
            return value
        } catch {
            throw CodecError("cannot decode \(Value.self): \(CodingErrors.describe(error))")
        }
    }
}

/// Readable accounts of `EncodingError` and `DecodingError`: the path, and what was expected or missing.
enum CodingErrors {
    static func describe(_ error: any Error) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            let names = keys.map { $0.intValue.map(String.init) ?? $0.stringValue }
            return names.isEmpty ? "the top level" : names.joined(separator: ".")
        }
        if let error = error as? EncodingError, case .invalidValue(_, let context) = error {
            return "\(path(context.codingPath)): \(context.debugDescription)"
        }
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath)): no value for '\(key.stringValue)'"
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(type), \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): expected \(type), found null"
        case .dataCorrupted(let context):
            return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}

/// The tags of the binary form.
@usableFromInline
enum BinaryTag {
    static let null: UInt8 = 0
    static let falseValue: UInt8 = 1
    static let trueValue: UInt8 = 2
    static let signed: UInt8 = 3
    static let unsigned: UInt8 = 4
    static let double: UInt8 = 5
    static let float: UInt8 = 6
    static let string: UInt8 = 7
    static let keyed: UInt8 = 8
    static let unkeyed: UInt8 = 9

    static func name(_ tag: UInt8) -> String {
        switch tag {
        case null: "null"
        case falseValue, trueValue: "a Bool"
        case signed, unsigned: "an integer"
        case double, float: "a floating-point number"
        case string: "a string"
        case keyed: "a keyed container"
        case unkeyed: "an unkeyed container"
        default: "an unknown tag \(tag)"
        }
    }

    /// How many bytes ``putVarint(_:_:)`` writes for `value`.
    static func varintSize(_ value: UInt64) -> Int {
        // 7 bits a byte; at least one.
        max(1, (64 - value.leadingZeroBitCount + 6) / 7)
    }

    @inlinable
    static func putVarint(_ value: UInt64, _ bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}
