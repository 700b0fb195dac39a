internal import LoopRuntime

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Where the demo writes: report lines, and live progress, which is a line redrawn in place on a
/// terminal and a plain line otherwise.
public final class Console: Sendable {
    /// Whether output goes to a terminal.
    public let isTerminal: Bool
    private let write: @Sendable (String) -> Void
    private let progressLine = Locked<String?>(nil)

    /// A console writing with `write`.
    public init(isTerminal: Bool, write: @escaping @Sendable (String) -> Void) {
        self.isTerminal = isTerminal
        self.write = write
    }

    /// Standard output; a terminal if it is one.
    public static func standardOutput() -> Console {
        Console(isTerminal: isatty(1) == 1) { text in
            var text = text
            text.withUTF8 { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = Glibc.write(1, bytes.baseAddress?.advanced(by: offset), bytes.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
    }

    /// Writes one report line (keeping the progress line below it on a terminal).
    public func line(_ text: String) {
        let progress = progressLine.withLock { $0 }
        write(isTerminal ? "\r\u{1B}[K" + text + "\n" + (progress ?? "") : text + "\n")
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
