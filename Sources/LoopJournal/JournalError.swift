/// Why a journal could not be written, read or replayed. Each says where: a path, a line, or a
/// sequence number.
public struct JournalError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case cannotOpen(path: String, errno: Int32)
        case cannotWrite(path: String, errno: Int32)
        case cannotRead(path: String, reason: String)
        case malformedLine(line: Int, reason: String)
        case sequenceGap(line: Int, expected: Int, found: Int)
        case digestMismatch(sequence: Int, recorded: String, replayed: String)
    }

    private let code: Code

    /// The file could not be opened for appending.
    public static func cannotOpen(_ path: String, errno: Int32) -> JournalError {
        JournalError(code: .cannotOpen(path: path, errno: errno))
    }

    /// A line could not be written.
    public static func cannotWrite(_ path: String, errno: Int32) -> JournalError {
        JournalError(code: .cannotWrite(path: path, errno: errno))
    }

    /// The file could not be read.
    public static func cannotRead(_ path: String, reason: String) -> JournalError {
        JournalError(code: .cannotRead(path: path, reason: reason))
    }

    /// A complete line (not the last) is not a journal record.
    public static func malformedLine(_ line: Int, reason: String) -> JournalError {
        JournalError(code: .malformedLine(line: line, reason: reason))
    }

    /// A record's sequence number is not the one after the previous record's.
    public static func sequenceGap(line: Int, expected: Int, found: Int) -> JournalError {
        JournalError(code: .sequenceGap(line: line, expected: expected, found: found))
    }

    /// Replay reached a state whose digest differs from the one recorded: the first diverging event.
    public static func digestMismatch(sequence: Int, recorded: String, replayed: String) -> JournalError {
        JournalError(code: .digestMismatch(sequence: sequence, recorded: recorded, replayed: replayed))
    }

    /// The sequence number of the first diverging event, for a digest mismatch.
    public var divergingSequence: Int? {
        if case .digestMismatch(let sequence, _, _) = code { sequence } else { nil }
    }

    /// The line the problem is on, for a malformed line or a sequence gap.
    public var line: Int? {
        switch code {
        case .malformedLine(let line, _), .sequenceGap(let line, _, _): line
        default: nil
        }
    }

    /// A sentence saying what is wrong and where.
    public var description: String {
        switch code {
        case .cannotOpen(let path, let errno): "cannot open journal \(path) (errno \(errno))"
        case .cannotWrite(let path, let errno): "cannot write to journal \(path) (errno \(errno))"
        case .cannotRead(let path, let reason): "cannot read journal \(path): \(reason)"
        case .malformedLine(let line, let reason): "line \(line) is not a journal record: \(reason)"
        case .sequenceGap(let line, let expected, let found):
            "line \(line) has sequence number \(found), expected \(expected)"
        case .digestMismatch(let sequence, let recorded, let replayed):
            "replay diverges at event \(sequence): recorded digest \(recorded), replayed \(replayed)"
        }
    }
}
