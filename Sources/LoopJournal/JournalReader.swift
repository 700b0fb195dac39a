internal import Foundation

/// What a journal file holds: its records in order, and warnings about what was ignored.
public struct JournalContents<Event> {
    /// The records, in sequence order.
    public var records: [JournalRecord<Event>]
    /// What was ignored and why, such as a torn last line; each names its line.
    public var warnings: [String]
}

extension JournalContents: Sendable where Event: Sendable {}

/// Reads journals written by ``JSONLinesJournal``.
public enum JournalReader {
    /// Reads the journal at `path`.
    ///
    /// A last line that is cut short (a write torn by a crash) is reported in the warnings with its
    /// line number and ignored. Any other line that is not a record, or a sequence number out of
    /// order, is an error naming the line. The file is never modified.
    public static func read<Event: Codable>(
        _ path: String,
        as _: Event.Type = Event.self
    ) throws(JournalError)
        -> JournalContents<Event>
    {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw .cannotRead(path, reason: "\(error.localizedDescription)")
        }
        return try parse(Array(data))
    }

    /// Parses journal lines from `data`; see ``read(_:as:)``.
    public static func parse<Event: Codable>(
        _ data: [UInt8],
        as _: Event.Type = Event.self
    ) throws(JournalError)
        -> JournalContents<Event>
    {
        let decoder = JSONDecoder()
        var lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        let complete = data.last == UInt8(ascii: "\n")
        if complete || lines.last?.isEmpty == true { lines.removeLast() }
        var records: [JournalRecord<Event>] = []
        var warnings: [String] = []
        for (index, bytes) in lines.enumerated() {
            let number = index + 1
            let isTornCandidate = !complete && index == lines.count - 1
            let record: JournalRecord<Event>
            do {
                record = try decoder.decode(JournalRecord<Event>.self, from: Data(bytes))
            } catch {
                if isTornCandidate {
                    warnings.append("line \(number) is incomplete (a torn write) and was ignored")
                    break
                }
                throw .malformedLine(number, reason: Self.reason(error))
            }
            let expected = (records.last?.sequence ?? 0) + 1
            guard record.sequence == expected else {
                throw .sequenceGap(line: number, expected: expected, found: record.sequence)
            }
            records.append(record)
        }
        return JournalContents(records: records, warnings: warnings)
    }

    private static func reason(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context): context.debugDescription
        case DecodingError.keyNotFound(let key, _): "missing \"\(key.stringValue)\""
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            context.debugDescription
        default: "\(error)"
        }
    }
}
