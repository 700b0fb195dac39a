internal import Foundation

/// A stable fingerprint of a state: FNV-1a (64-bit) over its JSON encoding with sorted keys, as 16
/// hexadecimal digits.
///
/// Equal states give equal digests in every run and on every machine, whatever the order of their
/// dictionaries, so a journal's digests can be checked when it is replayed elsewhere.
public enum StateDigest {
    /// The digest of `state`.
    public static func of(_ state: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = try encoder.encode(state)
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
