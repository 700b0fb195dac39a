// Foundation for JSON only: the one place this module uses it.
internal import Foundation

/// Encodes values as JSON, with sorted keys (so equal structs and string-keyed dictionaries give equal
/// bytes; a `Set`'s order is not fixed).
///
/// Its decoding errors name the path that did not decode and what was expected or missing
/// (`submitted.attempts: no value for 'attempts'`), rather than Foundation's bare
/// "the data couldn't be read".
public struct JSONCodec<Value: Codable>: EventCodec {
    /// Creates a codec.
    public init() {}

    /// The JSON bytes of `value`.
    public func encode(_ value: Value) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            return Array(try encoder.encode(value))
        } catch {
            throw CodecError("cannot encode \(Value.self): \(Self.describe(error))")
        }
    }

    /// The value `bytes` hold.
    public func decode(_ bytes: [UInt8]) throws -> Value {
        do {
            return try JSONDecoder().decode(Value.self, from: Data(bytes))
        } catch {
            throw CodecError("cannot decode \(Value.self): \(Self.describe(error))")
        }
    }

    /// A readable account of a coding error.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }
            return keys.isEmpty ? "the top level" : keys.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(path(context)): no value for '\(key.stringValue)'"
        case .typeMismatch(let type, let context):
            return "\(path(context)): expected \(type), \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "\(path(context)): expected \(type), found null"
        case .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}
