internal import Foundation
internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A journal in a local file, one JSON record per line (JSON Lines), only ever appended to.
///
/// Each record is written with a single `write` to a file opened with `O_APPEND`. A process killed at
/// any instant therefore leaves whole lines, and at worst a torn last line, which the reader reports
/// and ignores. With `syncEachAppend`, each line is also flushed to the disk before ``append(_:)``
/// returns, which survives power loss at the cost of a disk flush per event.
public final class JSONLinesJournal<Event: Codable & Sendable>: Sendable {
    /// The file's path.
    public let path: String
    private let descriptor: Int32
    private let syncEachAppend: Bool
    private let writing = Locked(())

    /// Opens (creating if needed) the journal at `path` for appending.
    public init(path: String, syncEachAppend: Bool = false) throws(JournalError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .cannotOpen(path, errno: errno) }
        self.path = path
        self.descriptor = descriptor
        self.syncEachAppend = syncEachAppend
    }

    deinit {
        close(descriptor)
    }

    /// Appends `record` as one line, keys sorted; when this returns, the line is in the file.
    public func append(_ record: JournalRecord<Event>) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var line = try encoder.encode(record)
        line.append(UInt8(ascii: "\n"))
        try writing.withLock { _ in
            try line.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = write(descriptor, bytes.baseAddress?.advanced(by: offset), bytes.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw JournalError.cannotWrite(path, errno: errno)
                    }
                    offset += written
                }
            }
            if syncEachAppend, fsync(descriptor) != 0 { throw JournalError.cannotWrite(path, errno: errno) }
        }
    }
}
