internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Where the demo writes: `say` lines, and live progress, which is a line redrawn in place on a
/// terminal and a plain line otherwise.
public final class Console: Sendable {
    /// Whether output goes to a terminal.
    public let isTerminal: Bool
    private let write: @Sendable (String) -> Void
    private let writeError: @Sendable (String) -> Void
    private let progressLine = Locked<String?>(nil)

    /// A console writing `say` lines with `write` and problems with `writeError` (`write` if `nil`).
    public init(
        isTerminal: Bool,
        write: @escaping @Sendable (String) -> Void,
        writeError: (@Sendable (String) -> Void)? = nil
    ) {
        self.isTerminal = isTerminal
        self.write = write
        self.writeError = writeError ?? write
    }

    /// Standard output (a terminal if it is one) for `say` lines, standard error for problems.
    public static func standardOutput() -> Console {
        Console(isTerminal: isatty(1) == 1, write: { writeAll($0, to: 1) }, writeError: { writeAll($0, to: 2) })
    }

    /// Writes all of `text` to `descriptor`; gives up quietly if it is closed (`EPIPE`, say).
    private static func writeAll(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(descriptor, bytes.baseAddress?.advanced(by: offset), bytes.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }

    /// Writes one `say` line (keeping the progress line below it on a terminal). Control characters
    /// in it (job names and output are untrusted) are shown escaped, never sent to the terminal.
    public func line(_ text: String) {
        let text = Self.escapingControlCharacters(text)
        let progress = progressLine.withLock { $0 }
        write(isTerminal ? "\r\u{1B}[K" + text + "\n" + (progress ?? "") : text + "\n")
    }

    /// Writes one line about a problem with the input, to standard error, escaped like ``line(_:)``.
    public func problem(_ text: String) {
        writeError(Self.escapingControlCharacters(text) + "\n")
    }

    /// `text` with every control character (but tab) written as `\u{1B}`-style escapes: `\x1b`.
    public static func escapingControlCharacters(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var escaped = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                escaped += "\\x" + (scalar.value < 16 ? "0" : "") + String(scalar.value, radix: 16)
            } else {
                escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        (scalar.value < 0x20 && scalar != "\t") || (0x7F...0x9F).contains(scalar.value)
    }

    /// Shows progress.
    public func progress(running: Int, queued: Int, done: Int, total: Int) {
        let text = "[\(done)/\(total) done, \(running) running, \(queued) queued]"
        if isTerminal {
            progressLine.withLock { $0 = text }
            write("\r\u{1B}[K" + text)
        } else {
            write("progress: " + text + "\n")
        }
    }

    /// Removes the progress line, before the summary.
    public func clearProgress() {
        progressLine.withLock { $0 = nil }
        if isTerminal { write("\r\u{1B}[K") }
    }
}
