import Testing

@testable import LoopPersistence

/// The file store's in-memory index (``StreamTable``), held against a `Dictionary` doing the same work:
/// names of every length the arena keeps in one or two length bytes and those it cannot keep, names
/// that are decimal numbers (kept in the slot) and those that only look like one, versions
/// below and past what a slot holds, and enough streams that probes pass other streams' slots.
@Suite struct StreamTableTests {
    static func entry(version: UInt64, tail: Int) -> StreamEntry {
        var entry = StreamEntry()
        entry.version = version
        entry.tail = Location(segment: tail % 7, offset: tail)
        return entry
    }

    /// `stream`'s version, or 0 when the table has no entry for it. (Not compared as an optional: under
    /// the address sanitizer, `#expect(optional == literal)` of this toolchain read 9 bytes of an 8-byte
    /// value in the comparison's own thunk.)
    static func version(of stream: String, in table: StreamTable) -> UInt64 {
        table[stream]?.version ?? 0
    }

    @Test func theIndexAnswersLikeADictionaryForEveryKindOfNameAndVersion() {
        var table = StreamTable()
        var model: [String: (version: UInt64, tail: Location)] = [:]
        var generator = SplitMix(state: 7)
        let odd = [
            "", "1", "10", "100", "é", "名前", String(repeating: "a", count: 127), String(repeating: "b", count: 128),
            String(repeating: "c", count: 300), String(repeating: "d", count: 32_767),
            // Longer than the arena keeps: held aside, and found the same.
            String(repeating: "e", count: 32_768), String(repeating: "f", count: 70_000),
        ]
        // Decimal numbers are kept in the slot itself, up to 2^31 - 2; the rest are names like any other.
        let numbers = [
            "0", "00", "007", "2147483646", "2147483647", "4294967295", "99999999999", "-1", "+1", "1 ", "１",
        ]
        let names = odd + numbers + (0..<20_000).map { "stream-\($0)" } + (0..<20_000).map { "\($0 * 97)" }
        for round in 0..<3 {
            for (index, name) in names.enumerated() where generator.next() % 3 != 0 || round == 0 {
                let version: UInt64 =
                    switch generator.next() % 4 {
                    case 0: (1 << 24) - 2 + generator.next() % 4  // around the largest version a slot holds
                    case 1: UInt64.max - generator.next() % 8
                    default: generator.next() % 1_000
                    }
                let entry = Self.entry(version: version, tail: index * 10 + round)
                table[name] = entry
                model[name] = (version, entry.tail)
            }
        }
        #expect(table.count == model.count)
        for (name, expected) in model {
            guard let found = table[name] else {
                Issue.record("'\(name.prefix(20))' is not found")
                continue
            }
            #expect(found.version == expected.version, "\(name.prefix(20))")
            #expect(found.tail == expected.tail, "\(name.prefix(20))")
        }
        for missing in ["stream-20000", "stream-", "11", "01", "2", "0000", String(repeating: "a", count: 126), "e"] {
            #expect(table[missing] == nil, "\(missing)")
        }
        var listed: [String: UInt64] = [:]
        var visits = 0
        table.forEveryStream { name, entry in
            listed[name] = entry.version
            visits += 1
        }
        #expect(visits == model.count)
        #expect(listed == model.mapValues(\.version))
    }

    /// Two spellings of one text are one stream, as in the store's other tables (keyed by `String`).
    /// Room made ahead (as an index checkpoint's load does) changes no answer, whether the streams that
    /// come are fewer than the room, as many, or many more (the shards then grow as before); room asked
    /// for once streams are there changes nothing.
    @Test func roomMadeAheadAnswersAsATableThatGrew() {
        for (reserved, added) in [(100_000, 10), (5_000, 5_000), (1_000, 12_000), (0, 3_000)] {
            var table = StreamTable()
            table.reserve(reserved)
            for index in 0..<added {
                table["s-\(index)"] = Self.entry(version: UInt64(index + 1), tail: index)
                if index == added / 2 { table.reserve(1_000_000) }
            }
            #expect(table.count == added)
            let wrong = (0..<added).filter { Self.version(of: "s-\($0)", in: table) != UInt64($0 + 1) }
            #expect(wrong.isEmpty, "reserved \(reserved), added \(added)")
            #expect(Self.version(of: "s-\(added)", in: table) == 0)
        }
    }

    @Test func namesSwiftHoldsEqualAreOneStream() {
        var table = StreamTable()
        table["caf\u{E9}"] = Self.entry(version: 1, tail: 1)
        table["cafe\u{301}"] = Self.entry(version: 2, tail: 2)
        table["\u{212A}"] = Self.entry(version: 3, tail: 3)
        #expect(table.count == 2)
        #expect(Self.version(of: "caf\u{E9}", in: table) == 2)
        #expect(Self.version(of: "K", in: table) == 3)
        #expect(table["k"] == nil)
    }

    /// Names that fill chunks to their last byte, read back from every chunk; an arena whose chunks are
    /// all taken refuses a name that does not fit, and keeps what it has.
    @Test func theArenaFillsChunksToTheirEndAndRefusesWhenFull() {
        var arena = NameArena(chunkLimit: 3)
        // 127 bytes after a length byte: 512 names fill a chunk of 65,536 bytes exactly.
        func name(_ index: Int) -> [UInt8] {
            Array(String(index).utf8) + Array(repeating: UInt8(ascii: "x"), count: 127 - String(index).utf8.count)
        }
        var places: [UInt32] = []
        for index in 0..<(3 * 512) {
            let place = name(index).withUnsafeBufferPointer { arena.add($0) }
            #expect(place != nil, "name \(index)")
            places.append(place ?? .max)
        }
        #expect(Set(places.map { $0 >> 16 }) == [0, 1, 2])
        #expect(arena.isFull)
        #expect(name(9_999).withUnsafeBufferPointer { arena.add($0) } == nil)
        // A number needs no room.
        #expect(Array("9999".utf8).withUnsafeBufferPointer { arena.add($0) } != nil)
        for (index, place) in places.enumerated() {
            #expect(arena.withName(at: place) { Array($0) } == name(index), "name \(index)")
            #expect(name(index).withUnsafeBufferPointer { arena.holds($0, at: place) })
        }
    }

    @Test func aVersionThatShrinksBelowTheSlotsLimitIsNotTakenFromTheSideTable() {
        var table = StreamTable()
        table["a"] = Self.entry(version: 1 << 40, tail: 1)
        #expect(Self.version(of: "a", in: table) == 1 << 40)
        table["a"] = Self.entry(version: 5, tail: 2)
        #expect(Self.version(of: "a", in: table) == 5)
        table["a"] = Self.entry(version: (1 << 24) - 1, tail: 3)
        #expect(Self.version(of: "a", in: table) == (1 << 24) - 1)
        #expect(table.count == 1)
    }
}
