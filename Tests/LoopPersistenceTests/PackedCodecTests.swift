import EffectHandlers
import LoopCore
import LoopPersistence
import Testing

@Suite struct PackedCodecTests {
    enum Account: Packable, Equatable {
        case opened(owner: String, limit: Int?)
        case deposited(Int)
        case tagged([String])

        func pack(into packer: inout Packer) {
            switch self {
            case .opened(let owner, let limit):
                packer.pack(case: 0)
                packer.pack(owner)
                packer.pack(limit)
            case .deposited(let amount):
                packer.pack(case: 1)
                packer.pack(amount)
            case .tagged(let tags):
                packer.pack(case: 2)
                packer.pack(tags)
            }
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            switch try unpacker.unpackCase() {
            case 0: self = .opened(owner: try unpacker.unpack(), limit: try unpacker.unpack())
            case 1: self = .deposited(try unpacker.unpack())
            case 2: self = .tagged(try unpacker.unpack())
            case let other: throw unpacker.unknownCase(other, of: Account.self)
            }
        }
    }

    struct Everything: Packable, Equatable {
        var int: Int
        var int8: Int8
        var int16: Int16
        var int32: Int32
        var int64: Int64
        var uint: UInt
        var uint8: UInt8
        var uint16: UInt16
        var uint32: UInt32
        var uint64: UInt64
        var flag: Bool
        var double: Double
        var float: Float
        var text: String
        var nested: [[Int]]
        var maybe: Account?

        func pack(into packer: inout Packer) {
            packer.pack(int)
            packer.pack(int8)
            packer.pack(int16)
            packer.pack(int32)
            packer.pack(int64)
            packer.pack(uint)
            packer.pack(uint8)
            packer.pack(uint16)
            packer.pack(uint32)
            packer.pack(uint64)
            packer.pack(flag)
            packer.pack(double)
            packer.pack(float)
            packer.pack(text)
            packer.pack(nested)
            packer.pack(maybe)
        }

        init(
            int: Int,
            int8: Int8,
            int16: Int16,
            int32: Int32,
            int64: Int64,
            uint: UInt,
            uint8: UInt8,
            uint16: UInt16,
            uint32: UInt32,
            uint64: UInt64,
            flag: Bool,
            double: Double,
            float: Float,
            text: String,
            nested: [[Int]],
            maybe: Account?
        ) {
            (self.int, self.int8, self.int16, self.int32, self.int64) = (int, int8, int16, int32, int64)
            (self.uint, self.uint8, self.uint16, self.uint32, self.uint64) = (uint, uint8, uint16, uint32, uint64)
            (self.flag, self.double, self.float, self.text, self.nested, self.maybe) =
                (flag, double, float, text, nested, maybe)
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            int = try unpacker.unpack()
            int8 = try unpacker.unpack()
            int16 = try unpacker.unpack()
            int32 = try unpacker.unpack()
            int64 = try unpacker.unpack()
            uint = try unpacker.unpack()
            uint8 = try unpacker.unpack()
            uint16 = try unpacker.unpack()
            uint32 = try unpacker.unpack()
            uint64 = try unpacker.unpack()
            flag = try unpacker.unpack()
            double = try unpacker.unpack()
            float = try unpacker.unpack()
            text = try unpacker.unpack()
            nested = try unpacker.unpack()
            maybe = try unpacker.unpack()
        }
    }

    static let extremes = Everything(
        int: .min,
        int8: .min,
        int16: .max,
        int32: .min,
        int64: .max,
        uint: .max,
        uint8: .max,
        uint16: .max,
        uint32: .max,
        uint64: .max,
        flag: true,
        double: -0.125,
        float: .infinity,
        text: "naïve ☃ \u{0}",
        nested: [[], [1, -1, 300]],
        maybe: .opened(owner: "ann", limit: nil)
    )

    @Test func everyStandardValueComesBackAsItWent() throws {
        let codec = PackedCodec<Everything>()
        let small = Everything(
            int: 0,
            int8: -1,
            int16: 1,
            int32: 63,
            int64: -64,
            uint: 0,
            uint8: 127,
            uint16: 128,
            uint32: 1,
            uint64: 0,
            flag: false,
            double: .nan,
            float: 0,
            text: "",
            nested: [],
            maybe: nil
        )
        #expect(try codec.decode(codec.encode(Self.extremes)) == Self.extremes)
        let back = try codec.decode(codec.encode(small))
        // NaN is not equal to itself: its bits are what must come back.
        #expect(back.double.bitPattern == small.double.bitPattern)
        var (expected, got) = (small, back)
        (expected.double, got.double) = (0, 0)
        #expect(got == expected)
        // A reply address is its request's id.
        #expect(PackedCodec<ReplyTo<Int>>().encode(ReplyTo(id: 300)) == [0xAC, 0x02])
        #expect(try PackedCodec<ReplyTo<Int>>().decode([0xAC, 0x02]).id == 300)
        for account in [Account.deposited(-5), .tagged(["a", "", "ü"]), .opened(owner: "", limit: 0)] {
            #expect(try PackedCodec<Account>().decode(PackedCodec<Account>().encode(account)) == account)
        }
    }

    @Test func theFormIsTheWrittenOrderAndNothingElse() {
        // Case 1, then 1 zigzag-encoded (2): two bytes, no keys, no tags.
        #expect(PackedCodec<Account>().encode(.deposited(1)) == [1, 2])
        // -1 zigzag-encodes to 1; 300 to 600 = 0xD8 0x04.
        #expect(PackedCodec<[Int]>().encode([-1, 300]) == [2, 1, 0xD8, 0x04])
        #expect(PackedCodec<String?>().encode("hé") == [1, 3, 0x68, 0xC3, 0xA9])
        #expect(PackedCodec<Double>().encode(1) == [0, 0, 0, 0, 0, 0, 0xF0, 0x3F])
        #expect(PackedCodec<UInt64>().encode(.max) == [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
    }

    /// Every prefix of a value's bytes is refused with an error (none traps or returns a value), and so is
    /// the value with a byte after it.
    @Test func cutBytesAreErrorsNeverValues() throws {
        let codec = PackedCodec<Everything>()
        let bytes = codec.encode(Self.extremes)
        for end in 0..<bytes.count {
            #expect(throws: CodecError.self) { try codec.decode(Array(bytes[..<end])) }
        }
        let error = try #require(throws: CodecError.self) { try codec.decode(bytes + [0]) }
        #expect(error.description == "cannot decode Everything: 1 bytes after the value")
    }

    @Test func damagedBytesSayWhereAndWhat() throws {
        func failure<T: Packable>(_ type: T.Type, _ bytes: [UInt8]) throws -> String {
            try #require(throws: CodecError.self) { try PackedCodec<T>().decode(bytes) }.description
        }
        #expect(try failure(Account.self, [7]) == "cannot decode Account: at byte 0 of 1: no case 7 in Account")
        #expect(
            try failure(Account.self, [1]) == "cannot decode Account: at byte 1 of 1: the bytes end inside a number"
        )
        #expect(try failure(Int8.self, [0x80, 0x02]) == "cannot decode Int8: at byte 0 of 2: 128 does not fit in Int8")
        #expect(
            try failure(UInt16.self, [0x80, 0x80, 0x04])
                == "cannot decode UInt16: at byte 0 of 3: 65536 does not fit in UInt16"
        )
        #expect(
            try failure(Bool.self, [2]) == "cannot decode Bool: at byte 0 of 1: 2 where a Bool (0 or 1) was expected"
        )
        #expect(
            try failure(String?.self, [5])
                == "cannot decode Optional<String>: at byte 0 of 1: 5 where an optional's 0 or 1 was expected"
        )
        #expect(
            try failure(String.self, [2, 0xC3, 0x28])
                == "cannot decode String: at byte 0 of 3: a string that is not UTF-8"
        )
        #expect(
            try failure(String.self, [9, 0x41])
                == "cannot decode String: at byte 0 of 2: a count of 9 with 1 bytes left"
        )
        #expect(
            try failure(Double.self, [1, 2, 3])
                == "cannot decode Double: at byte 0 of 3: the bytes end inside a number of 8 bytes"
        )
        #expect(
            try failure(UInt64.self, Array(repeating: 0xFF, count: 10) + [0x01])
                == "cannot decode UInt64: at byte 0 of 11: a number longer than 64 bits"
        )
    }

    indirect enum Node: Packable {
        case leaf
        case children([Node])

        func pack(into packer: inout Packer) {
            switch self {
            case .leaf: packer.pack(case: 0)
            case .children(let nodes):
                packer.pack(case: 1)
                packer.pack(nodes)
            }
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            switch try unpacker.unpackCase() {
            case 0: self = .leaf
            case 1: self = .children(try unpacker.unpack())
            case let other: throw unpacker.unknownCase(other, of: Node.self)
            }
        }
    }

    /// Bytes that nest a recursive type 100,000 deep fail at the limit instead of exhausting the stack;
    /// nesting within it comes back.
    @Test func deepNestingIsAnErrorNotAStackOverflow() throws {
        let deep = Array(repeating: [UInt8]([1, 1]), count: 100_000).joined() + [0]
        let error = try #require(throws: CodecError.self) { try PackedCodec<Node>().decode(Array(deep)) }
        #expect(error.description.hasSuffix("nesting deeper than 512 levels"))
        let fits = Array(Array(repeating: [UInt8]([1, 1]), count: 200).joined()) + [0]
        #expect(PackedCodec<Node>().encode(try PackedCodec<Node>().decode(fits)) == fits)
    }

    /// Any case number goes and comes back, and one a type does not know is reported where it begins.
    @Test func caseNumbersOfAnySizeComeBackAndAreReportedWhereTheyBegin() throws {
        for index in [0, 127, 128, -1, .max, .min] {
            var packer = Packer()
            packer.pack(case: index)
            var unpacker = Unpacker(packer.bytes)
            #expect(try unpacker.unpackCase() == index)
            #expect(unpacker.isAtEnd)
        }
        let multibyte = try #require(throws: CodecError.self) { try PackedCodec<Account>().decode([0x80, 0x01]) }
        #expect(multibyte.description == "cannot decode Account: at byte 0 of 2: no case 128 in Account")
    }

    /// A count or length from damaged bytes cannot make the reader allocate or loop past the bytes there
    /// are: a count of 2^62 elements in a few bytes is refused at once.
    @Test func aHugeCountIsRefusedBeforeAnythingIsRead() throws {
        var packer = Packer()
        packer.pack(UInt64(1) << 62)
        packer.pack(1)
        let error = try #require(throws: CodecError.self) { try PackedCodec<[Int]>().decode(packer.bytes) }
        #expect(error.description.contains("a count of 4611686018427387904 with 1 bytes left"))
        #expect(throws: CodecError.self) { try PackedCodec<[UInt8]>().decode([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) }
    }

    /// Random bytes decode to a value or fail with an error; a value that decodes encodes back to the
    /// same bytes (the form has one encoding per value, so a decoder reads nothing it would not write).
    @Test func randomBytesNeverTrap() {
        var generator = SplitMix(state: 7)
        let codec = PackedCodec<Everything>()
        var decoded = 0
        for _ in 0..<20_000 {
            let count = Int(generator.next() % 64)
            let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            if let value = try? PackedCodec<Account>().decode(bytes) {
                decoded += 1
                #expect(PackedCodec<Account>().encode(value) == bytes)
            }
            _ = try? codec.decode(bytes)
        }
        #expect(decoded > 0)
    }

    /// Two numbers whose packed bytes begin with what the durable loop's records and `VersionedCodec`
    /// begin theirs with (`0xFF "EL"`: 8,959 then 76; `0xFE "SV"`: 10,750 then 86).
    struct Pair: Packable, Equatable {
        var first: UInt64
        var second: UInt64

        static let recordMarker = Pair(first: 8_959, second: 76)
        static let versionMarker = Pair(first: 10_750, second: 86)

        init(first: UInt64, second: UInt64) { (self.first, self.second) = (first, second) }

        func pack(into packer: inout Packer) {
            packer.pack(first)
            packer.pack(second)
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            first = try unpacker.unpack()
            second = try unpacker.unpack()
        }
    }

    /// A codec may write bytes that begin as a durable record's layout or a versioned form's marker
    /// does; the store and `VersionedCodec` keep telling them apart, so they come back as they went.
    @Test func valuesThatBeginAsTheMarkersDoComeBack() async throws {
        #expect(PackedCodec<Pair>().encode(.recordMarker) == [0xFF, 0x45, 0x4C])
        #expect(PackedCodec<Pair>().encode(.versionMarker) == [0xFE, 0x53, 0x56])
        let versioned = VersionedCodec(version: 1, codec: PackedCodec<Pair>())
        #expect(try versioned.decode(versioned.encode(.versionMarker)) == .versionMarker)
        #expect(try versioned.encode(.recordMarker) == [0xFF, 0x45, 0x4C])

        let store = InMemoryEventStore()
        let program = DurableProgram<Pair, Pair, Never>(
            initial: Pair(first: 0, second: 0),
            update: .init { state, event in
                state = event
                return []
            }
        )
        func loop() -> DurableLoop<Pair, Pair, Never> {
            DurableLoop(
                stream: "pairs",
                program: program,
                effects: .init(),
                store: store,
                events: versioned,
                states: versioned,
                snapshotEvery: 2
            )
        }
        // Each loop recovers what the one before stored: an event, a snapshot, a snapshot and an event.
        for event in [Pair.recordMarker, .recordMarker, .versionMarker, .recordMarker] {
            let current = loop()
            let running = Task { try await current.run() }
            _ = try await current.sendDurably(event)
            #expect(try await current.durableState() == event)
            current.stop()
            _ = try await running.value
        }
        // A graceful stop saves the snapshots due: the last, at version 4, holds the record's marker.
        #expect(try await store.latestSnapshot(of: "pairs")?.version == 4)
        let last = loop()
        let running = Task { try await last.run() }
        #expect(try await last.durableState() == .recordMarker)
        last.stop()
        _ = try await running.value
    }

    /// A durable group whose events and states are packed records every event and recovers from them.
    @Test func aDurableGroupRecoversPackedEvents() async throws {
        let store = InMemoryEventStore()
        let program = DurableProgram<Int, Account, Never>(
            initial: 0,
            update: .init { total, event in
                if case .deposited(let amount) = event { total += amount }
                return []
            }
        )
        func group() -> DurableLoopGroup<String, Int, Account, Never> {
            DurableLoopGroup(
                program: { _ in program },
                effects: .init(),
                store: store,
                events: PackedCodec<Account>(),
                states: PackedCodec<Int>(),
                snapshotEvery: 3
            )
        }
        let first = group()
        let running = Task { try await first.run() }
        for amount in 1...5 { _ = try await first.sendDurably(.deposited(amount), to: "a") }
        first.stop()
        _ = try await running.value
        #expect(try await store.read("a", after: 0, limit: 1).map(\.payload) == [[1, 2]])

        let second = group()
        let again = Task { try await second.run() }
        #expect(try await second.durableState(of: "a") == 15)
        second.stop()
        _ = try await again.value
    }
}
