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
            let found = table[name]
            #expect(found?.version == expected.version, "\(name.prefix(20))")
            #expect(found?.tail == expected.tail, "\(name.prefix(20))")
        }
        for missing in ["stream-20000", "stream-", "11", "01", "2", "0000", String(repeating: "a", count: 126), "e"] {
            #expect(table[missing] == nil, "\(missing)")
        }
        var listed: [String: UInt64] = [:]
        table.forEveryStream { name, entry in listed[name] = entry.version }
        #expect(listed == model.mapValues(\.version))
    }

    @Test func aVersionThatShrinksBelowTheSlotsLimitIsNotTakenFromTheSideTable() {
        var table = StreamTable()
        table["a"] = Self.entry(version: 1 << 40, tail: 1)
        #expect(table["a"]?.version == 1 << 40)
        table["a"] = Self.entry(version: 5, tail: 2)
        #expect(table["a"]?.version == 5)
        table["a"] = Self.entry(version: (1 << 24) - 1, tail: 3)
        #expect(table["a"]?.version == (1 << 24) - 1)
        #expect(table.count == 1)
    }
}
