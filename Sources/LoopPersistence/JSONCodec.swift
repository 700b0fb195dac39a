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
            throw CodecError("cannot encode \(Value.self): \(CodingErrors.describe(error))")
        }
    }

    /// The value `bytes` hold.
    public func decode(_ bytes: [UInt8]) throws -> Value {
        do {
            return try JSONDecoder().decode(Value.self, from: Data(bytes))
        } catch {
            throw CodecError("cannot decode \(Value.self): \(CodingErrors.describe(error))")
        }
    }
}
