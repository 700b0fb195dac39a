import LoopPersistence
import Testing

@Suite struct BinaryCodecTests {
    enum Kind: Codable, Hashable {
        case plain
        case tagged(String, weight: Double)
        case nested(Inner)
    }

    struct Inner: Codable, Hashable {
        var values: [Int8]
        var flag: Bool?
    }

    struct Everything: Codable, Hashable {
        var name: String
        var count: Int
        var small: UInt8
        var big: UInt64
        var negative: Int64
        var ratio: Double
        var single: Float
        var optional: String?
        var missing: Int?
        var kinds: [Kind]
        var byName: [String: Int]
        var byNumber: [Int: String]
        var tags: Set<String>
        var wait: Duration
        var nestedArrays: [[Int]]
    }

    static let sample = Everything(
        name: "naïve ☃ name",
        count: -42,
        small: 255,
        big: .max,
        negative: .min,
        ratio: -0.125,
        single: 3.5,
        optional: "here",
        missing: nil,
        kinds: [.plain, .tagged("t", weight: 2), .nested(Inner(values: [-128, 0, 127], flag: nil))],
        byName: ["a": 1, "b": -2],
        byNumber: [7: "seven", -1: "minus one"],
        tags: ["x", "y"],
        wait: .milliseconds(1_500),
        nestedArrays: [[], [1], [2, 3]]
    )

    @Test func everyKindOfValueRoundTrips() throws {
        let codec = BinaryCodec<Everything>()
        #expect(try codec.decode(codec.encode(Self.sample)) == Self.sample)
        #expect(try BinaryCodec<Int>().decode(BinaryCodec<Int>().encode(.min)) == .min)
        #expect(try BinaryCodec<String?>().decode(BinaryCodec<String?>().encode(nil)) == nil)
        #expect(try BinaryCodec<[Kind]>().decode(BinaryCodec<[Kind]>().encode([])) == [])
    }

    /// The form is what the store holds: its bytes never change. A keyed container is its tag, the
    /// length of its body, then the body: the count of entries, and each key (length, UTF-8) with its value.
    @Test func theFormIsStable() throws {
        struct Pair: Codable, Equatable {
            var a: Int
            var b: [String]
        }
        let bytes = try BinaryCodec<Pair>().encode(Pair(a: -2, b: ["hi"]))
        #expect(
            bytes == [
                8, 14, 2,  // keyed, 14 bytes of body, 2 entries
                1, 97, 3, 3,  // "a": signed, zigzag(-2) = 3
                1, 98, 9, 5, 1, 7, 2, 104, 105,  // "b": unkeyed, 5 bytes, 1 item: string "hi"
            ]
        )
    }

    /// Containers whose bodies need lengths of two and three bytes come back whole.
    @Test func longContainersRoundTrip() throws {
        struct Long: Codable, Equatable {
            var names: [String]
            var inner: [String: [Int]]
        }
        let long = Long(
            names: (0..<3_000).map { "name \($0)" },
            inner: ["x": Array(0..<100), String(repeating: "k", count: 200): Array(0..<20_000)]
        )
        let codec = BinaryCodec<Long>()
        #expect(try codec.decode(codec.encode(long)) == long)
    }

    @Test func itIsSmallerThanJSON() throws {
        let binary = try BinaryCodec<Everything>().encode(Self.sample)
        let json = try JSONCodec<Everything>().encode(Self.sample)
        #expect(binary.count < json.count)
    }

    /// A field added later as an optional decodes from old bytes as absent; fields are found by name.
    @Test func anOptionalFieldAddedLaterDecodesAsAbsent() throws {
        struct Old: Codable { var name: String }
        struct New: Codable, Equatable {
            var added: Int?
            var name: String
        }
        let old = try BinaryCodec<Old>().encode(Old(name: "kept"))
        #expect(try BinaryCodec<New>().decode(old) == New(added: nil, name: "kept"))
    }

    @Test func whatDoesNotDecodeIsNamedByPath() throws {
        struct Wanted: Codable { var name: String, attempts: Int }
        struct Other: Codable { var name: String, attempts: String }
        let missing = try BinaryCodec<[String: String]>().encode(["name": "backup"])
        #expect(throws: CodecError("cannot decode Wanted: the top level: no value for 'attempts'")) {
            try BinaryCodec<Wanted>().decode(missing)
        }
        let mismatched = try BinaryCodec<Other>().encode(Other(name: "backup", attempts: "two"))
        #expect(throws: CodecError("cannot decode Wanted: attempts: expected Int, found a string")) {
            try BinaryCodec<Wanted>().decode(mismatched)
        }
        let tooBig = try BinaryCodec<Int>().encode(300)
        #expect(throws: CodecError("cannot decode UInt8: the top level: 300 does not fit in UInt8")) {
            try BinaryCodec<UInt8>().decode(tooBig)
        }
    }

    class Base: Codable {
        var id: Int
        init(id: Int) { self.id = id }
    }

    final class Derived: Base, @unchecked Sendable {
        var extra: String
        enum CodingKeys: String, CodingKey { case extra }

        init(id: Int, extra: String) {
            self.extra = extra
            super.init(id: id)
        }

        required init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            extra = try container.decode(String.self, forKey: .extra)
            try super.init(from: container.superDecoder())
        }

        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(extra, forKey: .extra)
            try super.encode(to: container.superEncoder())
        }
    }

    /// A subclass encodes its superclass's part under the codec's own "super" key, which the class's
    /// coding keys need not have.
    @Test func aSubclassRoundTripsThroughItsSuperEncoder() throws {
        let codec = BinaryCodec<Derived>()
        let back = try codec.decode(codec.encode(Derived(id: 7, extra: "x")))
        #expect(back.id == 7 && back.extra == "x")
    }

    /// A dictionary decodes by asking for each of its keys: a large one is indexed once, not scanned per
    /// key (20,000 keys took minutes when scanned).
    @Test func aLargeDictionaryDecodes() throws {
        let dictionary = Dictionary(uniqueKeysWithValues: (0..<20_000).map { ("key-\($0)", $0) })
        let codec = BinaryCodec<[String: Int]>()
        #expect(try codec.decode(codec.encode(dictionary)) == dictionary)
    }

    indirect enum Tree: Codable, Equatable {
        case leaf
        case node(Tree)
    }

    /// Nesting deeper than the codec's limit fails with an error, encoding and decoding, rather than
    /// exhausting the stack (bytes from a damaged or crafted store can nest as deep as they like).
    @Test func nestingPastTheLimitIsAnError() throws {
        var tree = Tree.leaf
        for _ in 0..<600 { tree = .node(tree) }
        #expect(throws: CodecError.self) { try BinaryCodec<Tree>().encode(tree) }
        // 5,000 levels of {"node": {"_0": ...}}, built from the inside out.
        var bytes = try BinaryCodec<Tree>().encode(.leaf)
        func keyed(_ key: String, _ value: [UInt8]) -> [UInt8] {
            var body: [UInt8] = [1, UInt8(key.utf8.count)] + Array(key.utf8) + value
            var length: [UInt8] = []
            var count = UInt64(body.count)
            while count >= 0x80 {
                length.append(UInt8(truncatingIfNeeded: count) | 0x80)
                count >>= 7
            }
            length.append(UInt8(count))
            body = [8] + length + body
            return body
        }
        for _ in 0..<5_000 { bytes = keyed("node", keyed("_0", bytes)) }
        #expect(throws: CodecError.self) { try BinaryCodec<Tree>().decode(bytes) }
        var shallow = Tree.leaf
        for _ in 0..<100 { shallow = .node(shallow) }
        #expect(try BinaryCodec<Tree>().decode(BinaryCodec<Tree>().encode(shallow)) == shallow)
    }

    /// Bytes from a damaged file or an attacker: every cut and every flipped byte of a valid encoding,
    /// and random bytes, give an error or a value, never a crash.
    @Test func damagedBytesNeverCrash() throws {
        let codec = BinaryCodec<Everything>()
        let bytes = try codec.encode(Self.sample)
        for cut in 0..<bytes.count {
            #expect(throws: CodecError.self) { try codec.decode(Array(bytes.prefix(cut))) }
        }
        for index in bytes.indices {
            for flip: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[index] ^= flip
                _ = try? codec.decode(damaged)
            }
        }
        var random = SplitMix(state: 2026_11_23)
        for _ in 0..<20_000 {
            let noise = (0..<Int.random(in: 0...64, using: &random)).map { _ in
                UInt8.random(in: 0...255, using: &random)
            }
            _ = try? codec.decode(noise)
            _ = try? BinaryCodec<Kind>().decode(noise)
        }
        #expect(throws: CodecError.self) { try codec.decode(bytes + [0]) }
    }
}

/// A small seeded generator, so the random inputs are the same on every run.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
