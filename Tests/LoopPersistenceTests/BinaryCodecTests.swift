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

    /// Paths deeper than one key are named in full: through arrays, an enum's payload and a
    /// dictionary (pinned before a decoder that kept a value's last keys apart from the path's array was
    /// tried; see `Docs/Performance.md`).
    @Test func deepPathsAreNamed() throws {
        struct Count<Number: Codable>: Codable { var count: Number }
        enum Step<Number: Codable>: Codable {
            case run(Count<Number>)
            case wait
        }
        struct Job<Number: Codable>: Codable {
            var steps: [Step<Number>]
            var byName: [String: Count<Number>]
        }
        struct Plan<Number: Codable>: Codable { var jobs: [Job<Number>] }
        func plan<Number>(_ number: Number) -> Plan<Number> {
            let step = Step.run(Count(count: number))
            return Plan(jobs: [
                Job(steps: [.wait], byName: [:]), Job(steps: [.wait, step], byName: ["x": Count(count: number)]),
            ])
        }
        let wrong = try BinaryCodec<Plan<String>>().encode(plan("two"))
        #expect(
            throws: CodecError("cannot decode Plan<Int>: jobs.1.steps.1.run._0.count: expected Int, found a string")
        ) {
            try BinaryCodec<Plan<Int>>().decode(wrong)
        }
        struct NoCount: Codable { var other: Int }
        let missing = try BinaryCodec<[String: NoCount]>().encode(["x": NoCount(other: 1)])
        #expect(throws: CodecError("cannot decode Dictionary<String, Count<Int>>: x: no value for 'count'")) {
            try BinaryCodec<[String: Count<Int>]>().decode(missing)
        }
        let twoCases = try BinaryCodec<[[String: [String: Int]]]>().encode([["run": [:], "wait": [:]]])
        #expect(
            throws: CodecError(
                "cannot decode Array<Step<Int>>: 0: expected Step<Int>, Invalid number of keys found, expected one."
            )
        ) { try BinaryCodec<[Step<Int>]>().decode(twoCases) }
        let deepMissing = try BinaryCodec<[[String: [String: NoCount]]]>().encode([["run": ["_0": NoCount(other: 2)]]])
        #expect(throws: CodecError("cannot decode Array<Step<Int>>: 0.run._0: no value for 'count'")) {
            try BinaryCodec<[Step<Int>]>().decode(deepMissing)
        }
        let tooBig = try BinaryCodec<[[String: [String: [String: Int]]]]>().encode([["a": ["b": ["count": 300]]]])
        #expect(
            throws: CodecError(
                "cannot decode Array<Dictionary<String, Dictionary<String, Count<UInt8>>>>: 0.a.b.count: 300 does not fit in UInt8"
            )
        ) {
            try BinaryCodec<[[String: [String: Count<UInt8>]]]>().decode(tooBig)
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

/// The codec writes values straight into one buffer when they use their containers in order, and
/// builds a tree when they do not: both must give the same bytes, and each must be the one used.
@Suite struct BinaryStreamingTests {
    typealias Everything = BinaryCodecTests.Everything

    /// Both ways to the bytes of `value`: the fast one must be taken and agree with the tree.
    func expectStreamed<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let streamed = BinaryStreaming.bytes(of: value)
        let tree = try BinaryCodec<T>.encodeAsTree(value)
        #expect(streamed == tree, sourceLocation: sourceLocation)
        #expect(try BinaryCodec<T>().decode(BinaryCodec<T>().encode(value)) == value, sourceLocation: sourceLocation)
    }

    /// Random values of every kind, with strings, containers and counts past 127 (whose lengths take
    /// more than the one byte the stream leaves for them), and a string of 20,001 bytes.
    @Test func inOrderValuesAreStreamedWithTheTreesBytes() throws {
        var random = SplitMix(state: 2026_11_26)
        func text(_ random: inout SplitMix) -> String {
            let length = [0, 1, 5, 127, 128, 300].randomElement(using: &random) ?? 0
            return String(repeating: "é", count: length / 2) + String(repeating: "x", count: length % 2)
        }
        for round in 0..<60 {
            let many = round % 20 == 0 ? 200 : Int.random(in: 0...5, using: &random)
            let value = Everything(
                name: text(&random),
                count: Int.random(in: .min ... .max, using: &random),
                small: UInt8.random(in: 0...255, using: &random),
                big: UInt64.random(in: 0 ... .max, using: &random),
                negative: Int64.random(in: .min...0, using: &random),
                ratio: Double.random(in: -1e9...1e9, using: &random),
                single: Float.random(in: -1...1, using: &random),
                optional: round % 3 == 0 ? nil : text(&random),
                missing: round % 2 == 0 ? nil : round,
                kinds: (0..<many).map { index in
                    switch index % 3 {
                    case 0: .plain
                    case 1: .tagged(text(&random), weight: Double(index))
                    default:
                        .nested(.init(values: (0..<many).map { Int8(truncatingIfNeeded: $0) }, flag: index % 2 == 0))
                    }
                },
                byName: Dictionary(uniqueKeysWithValues: (0..<many).map { ("k\($0)", $0) }),
                byNumber: Dictionary(uniqueKeysWithValues: (0..<many).map { ($0, text(&random)) }),
                tags: Set((0..<many).map { "t\($0)" }),
                wait: .nanoseconds(Int64.random(in: 0...1_000_000_000, using: &random)),
                nestedArrays: (0..<many).map { Array(0..<$0) }
            )
            try expectStreamed(value)
        }
        try expectStreamed(BinaryCodecTests.sample)
        try expectStreamed(String(repeating: "é", count: 10_000) + "x")
        try expectStreamed(42)
        try expectStreamed("top")
        try expectStreamed([Int?.none, 1])
        try expectStreamed(Empty())
        var tree = BinaryCodecTests.Tree.leaf
        for _ in 0..<200 { tree = .node(tree) }
        try expectStreamed(tree)
    }

    /// Nothing encoded at all is null, as in the tree.
    struct Empty: Codable, Equatable {
        init() {}
        init(from decoder: any Decoder) throws {}
        func encode(to encoder: any Encoder) throws {}
    }

    enum Key: String, CodingKey { case a, b, c }

    /// Takes two nested containers, then writes to the first after the second was taken.
    struct Interleaved: Encodable {
        func encode(to encoder: any Encoder) throws {
            var top = encoder.container(keyedBy: Key.self)
            var first = top.nestedContainer(keyedBy: Key.self, forKey: .a)
            var second = top.nestedUnkeyedContainer(forKey: .b)
            try second.encode(1)
            try first.encode("late", forKey: .c)
        }
    }

    /// Asks its encoder for a keyed container twice, writing to a nested one between the two: in order
    /// still (the nested one is finished when its parent is written to again), so it is streamed.
    struct Reopened: Encodable {
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: Key.self)
            try first.encode(1, forKey: .a)
            var inner = first.nestedUnkeyedContainer(forKey: .b)
            try inner.encode("x")
            var again = encoder.container(keyedBy: Key.self)
            try again.encode(2, forKey: .c)
        }
    }

    /// Writes a single value twice: the tree keeps the second.
    struct Overwritten: Encodable {
        func encode(to encoder: any Encoder) throws {
            var single = encoder.singleValueContainer()
            try single.encode(1)
            try single.encode("second")
        }
    }

    /// Starts keyed, then asks for an unkeyed container: the tree keeps the unkeyed one.
    struct SwitchedKinds: Encodable {
        func encode(to encoder: any Encoder) throws {
            var keyed = encoder.container(keyedBy: Key.self)
            try keyed.encode(1, forKey: .a)
            var unkeyed = encoder.unkeyedContainer()
            try unkeyed.encode(2)
        }
    }

    /// Keeps a container of its parent's and writes to it from inside a nested value.
    final class Escaping: Encodable, @unchecked Sendable {
        func encode(to encoder: any Encoder) throws {
            var top = encoder.container(keyedBy: Key.self)
            try top.encode(Inner(parent: top), forKey: .a)
        }

        struct Inner: Encodable {
            let parent: KeyedEncodingContainer<Key>
            func encode(to encoder: any Encoder) throws {
                var parent = parent
                try parent.encode("from inside", forKey: .b)
                var own = encoder.singleValueContainer()
                try own.encode(3)
            }
        }
    }

    /// Takes its unkeyed container twice and writes through both, then writes the count the first copy
    /// sees: shared, as in the tree.
    struct TwiceUnkeyed: Encodable {
        func encode(to encoder: any Encoder) throws {
            var first = encoder.unkeyedContainer()
            try first.encode(1)
            var second = encoder.unkeyedContainer()
            try second.encode(2)
            try first.encode(first.count)
        }
    }

    /// Throws from inside a nested value, after writing part of it or nothing.
    struct Throwing: Encodable {
        let afterWriting: Bool
        func encode(to encoder: any Encoder) throws {
            if afterWriting {
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(1, forKey: .a)
            }
            throw EncodingError.invalidValue(0, .init(codingPath: encoder.codingPath, debugDescription: "no"))
        }
    }

    /// Catches a nested value's error and goes on: the tree keeps no trace of the failed entry.
    struct Forgiving: Encodable {
        let afterWriting: Bool
        let last: Bool
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            if !last { try container.encode("before", forKey: .b) }
            try? container.encode(Throwing(afterWriting: afterWriting), forKey: .a)
            if !last { try container.encode("after", forKey: .c) }
        }
    }

    /// Values that use their containers out of order are not streamed, and the codec gives them the
    /// tree's bytes; a subclass's super encoder goes the same way, and so does a value that catches an
    /// error of a nested one and goes on.
    @Test func outOfOrderValuesFallBackToTheTree() throws {
        func expectTree<T: Encodable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
            #expect(BinaryStreaming.bytes(of: value) == nil, sourceLocation: sourceLocation)
            let tree = try BinaryCodec<Wrapped<T>>.encodeAsTree(Wrapped(value))
            #expect(try BinaryCodec<Wrapped<T>>().encode(Wrapped(value)) == tree, sourceLocation: sourceLocation)
        }
        try expectTree(Interleaved())
        let reopened = try BinaryCodec<Wrapped<Reopened>>.encodeAsTree(Wrapped(Reopened()))
        #expect(BinaryStreaming.bytes(of: Reopened()) == reopened)
        let twice = try BinaryCodec<Wrapped<TwiceUnkeyed>>.encodeAsTree(Wrapped(TwiceUnkeyed()))
        #expect(BinaryStreaming.bytes(of: TwiceUnkeyed()) == twice)
        try expectTree(Overwritten())
        try expectTree(SwitchedKinds())
        try expectTree(Escaping())
        for afterWriting in [false, true] {
            for last in [false, true] { try expectTree(Forgiving(afterWriting: afterWriting, last: last)) }
        }
        try expectTree(BinaryCodecTests.Derived(id: 1, extra: "x"))
        let back = try BinaryCodec<BinaryCodecTests.Derived>()
            .decode(BinaryCodec<BinaryCodecTests.Derived>().encode(.init(id: 9, extra: "y")))
        #expect(back.id == 9 && back.extra == "y")
    }

    /// An encode-only value made `Codable` for the codec's type, never decoded.
    struct Wrapped<T: Encodable>: Codable {
        let value: T
        init(_ value: T) { self.value = value }
        init(from decoder: any Decoder) throws { throw CodecError("encode only") }
        func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
    }

    /// An error thrown while streaming is the tree's error, naming the path.
    @Test func anErrorIsTheTreesError() throws {
        struct Refusing: Codable {
            init() {}
            init(from decoder: any Decoder) throws {}
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(1, forKey: .a)
                throw EncodingError.invalidValue(1, .init(codingPath: encoder.codingPath, debugDescription: "no"))
            }
        }
        struct Outer: Codable {
            var inner = [Refusing()]
            init() {}
        }
        #expect(BinaryStreaming.bytes(of: Outer()) == nil)
        #expect(throws: CodecError("cannot encode Outer: inner.0: no")) { try BinaryCodec<Outer>().encode(Outer()) }
    }
}
