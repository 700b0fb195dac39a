import LoopPersistence
import Testing

@Suite struct RecordFrameTests {
    let records: [[UInt8]] = [Array("first".utf8), [], Array(repeating: 7, count: 1_000), Array("last".utf8)]

    var file: [UInt8] { records.flatMap(RecordFrame.encode) }

    func readAll(_ bytes: [UInt8]) -> (records: [[UInt8]], stop: RecordFrame.Read) {
        var offset = 0
        var found: [[UInt8]] = []
        while true {
            switch RecordFrame.read(bytes, at: offset) {
            case .record(let payload, let next):
                found.append(Array(payload))
                offset = next
            case let stop:
                return (found, stop)
            }
        }
    }

    @Test func theChecksumIsTheStandardCRC32() {
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
    }

    @Test func framesReadBackInOrderToTheEnd() {
        let (found, stop) = readAll(file)
        #expect(found == records)
        #expect(stop == .end)
    }

    /// A crash can stop a write at any byte: every cut inside the last frame is a torn tail at its start,
    /// and every record before it is intact.
    @Test func everyCutOfTheLastFrameIsATornTail() {
        let whole = file
        let lastStart = whole.count - RecordFrame.encode(records.last ?? []).count
        for cut in lastStart..<whole.count where cut > lastStart {
            let (found, stop) = readAll(Array(whole.prefix(cut)))
            #expect(found == Array(records.dropLast()), "cut at \(cut)")
            #expect(stop == .tornTail(offset: lastStart), "cut at \(cut)")
        }
    }

    @Test func aDamagedLastFrameIsATornTail() {
        var bytes = file
        bytes[bytes.count - 1] ^= 0xFF
        #expect(readAll(bytes).stop == .tornTail(offset: bytes.count - RecordFrame.encode(records.last ?? []).count))
    }

    /// Damage with good data after it is corruption, named by offset, never skipped.
    @Test func aDamagedFrameInTheMiddleIsCorruptionAtItsOffset() {
        var bytes = file
        let secondStart = RecordFrame.encode(records[0]).count
        let thirdStart = secondStart + RecordFrame.encode(records[1]).count
        bytes[thirdStart + RecordFrame.headerSize + 10] ^= 0x01
        let (found, stop) = readAll(bytes)
        #expect(found == Array(records.prefix(2)))
        #expect(stop == .corrupted(offset: thirdStart, reason: "the checksum does not match the 1000-byte payload"))
    }

    @Test func anAbsurdLengthIsCorruption() {
        var bytes = file
        bytes[3] = 0xFF
        guard case .corrupted(let offset, _) = RecordFrame.read(bytes, at: 0) else {
            Issue.record("expected corruption")
            return
        }
        #expect(offset == 0)
    }

    @Test func framingIntoABufferGivesTheFramesBytes() {
        var bytes: [UInt8] = [9, 9]
        RecordFrame.append(framing: [1, 2, 3], to: &bytes)
        RecordFrame.append(framing: [], to: &bytes)
        #expect(bytes == [9, 9] + RecordFrame.encode([1, 2, 3]) + RecordFrame.encode([]))
    }
}
