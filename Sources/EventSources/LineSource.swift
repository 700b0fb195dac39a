public import LoopCore
internal import Synchronization

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A source that sends each line read from a file descriptor, such as standard input.
///
/// Reading never blocks a thread of the concurrency pool: a dedicated thread waits for data with
/// `poll` and reads only when data or the end of input is there, checking for cancellation at least
/// every ``pollInterval``. Lines end at `\n` (a trailing `\r` is removed); bytes that are not valid
/// UTF-8 are replaced, never rejected; a line longer than ``maximumLineLength`` bytes is sent in pieces
/// of that length, so memory stays bounded whatever the input. At the end of input, a last
/// unterminated line is sent, then `end` if given. The descriptor is not closed.
///
/// ```swift
/// LineSource(fileDescriptor: 0, end: .inputClosed) { line in .command(line) }
/// ```
public struct LineSource<Event: Sendable>: EventSource {
    /// The longest line sent whole, in bytes.
    public static var maximumLineLength: Int { 1 << 20 }
    /// The longest the reading thread waits before it checks whether the source was cancelled.
    public static var pollInterval: Duration { .milliseconds(50) }

    private let fileDescriptor: Int32
    private let end: Event?
    private let event: @Sendable (String) -> Event

    /// Creates a source that reads lines from `fileDescriptor`, sends `event` of each, and `end` at the
    /// end of input.
    public init(fileDescriptor: Int32, end: Event? = nil, event: @escaping @Sendable (String) -> Event) {
        self.fileDescriptor = fileDescriptor
        self.end = end
        self.event = event
    }

    /// Reads and sends lines until the end of input, a read error (thrown), or cancellation.
    public func run(send: Send<Event>) async throws {
        let (chunks, continuation) = AsyncThrowingStream<[UInt8], any Error>.makeStream()
        let reader = ChunkReader(fileDescriptor: fileDescriptor, continuation: continuation)
        continuation.onTermination = { _ in reader.stop() }
        guard reader.start() else { throw LineSourceError.threadUnavailable }
        defer { reader.stop() }

        var splitter = LineSplitter(maximumLineLength: Self.maximumLineLength)
        for try await chunk in chunks {
            for line in splitter.append(chunk) where !deliver(event(line), send) { return }
        }
        if let last = splitter.finish(), !deliver(event(last), send) { return }
        if let end { _ = deliver(end, send) }
    }

    /// Sends `event`; `false` when the loop takes no more events and reading should stop.
    private func deliver(_ event: Event, _ send: Send<Event>) -> Bool {
        if case .rejected(let rejection) = send(event), rejection != .inboxFull { return false }
        return true
    }
}

/// The reason a ``LineSource`` stopped reading.
public enum LineSourceError: Error, Hashable, Sendable {
    /// `read` or `poll` failed with this `errno`.
    case readFailed(errno: Int32)
    /// No thread could be started to read with.
    case threadUnavailable
}

/// Reads chunks from a descriptor on a thread of its own and yields them to a stream.
final class ChunkReader: Sendable {
    private let fileDescriptor: Int32
    private let continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation
    private let stopped = Atomic<Bool>(false)

    init(fileDescriptor: Int32, continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation) {
        self.fileDescriptor = fileDescriptor
        self.continuation = continuation
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    /// Starts the reading thread, detached; `false` if none could be started. It ends on its own within
    /// one poll interval of ``stop()`` or at the end of input.
    func start() -> Bool {
        let thread = OSThread({ self.readUntilDone() }, runHereIfUnavailable: false)
        thread.detach()
        return thread.started
    }

    private func readUntilDone() {
        let timeout = Int32(LineSource<Never>.pollInterval / .milliseconds(1))
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.load(ordering: .acquiring) {
            var request = pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&request, 1, timeout)
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            if ready < 0 {
                return continuation.finish(throwing: LineSourceError.readFailed(errno: errno))
            }
            let count = buffer.withUnsafeMutableBytes { read(fileDescriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                continuation.yield(Array(buffer.prefix(count)))
            } else if count == 0 {
                return continuation.finish()
            } else if errno != EAGAIN && errno != EINTR {
                return continuation.finish(throwing: LineSourceError.readFailed(errno: errno))
            }
        }
        continuation.finish()
    }
}

/// Cuts a byte stream into lines of bounded length.
struct LineSplitter {
    let maximumLineLength: Int
    private var pending: [UInt8] = []

    init(maximumLineLength: Int) {
        self.maximumLineLength = maximumLineLength
    }

    /// The complete lines that `bytes` finishes.
    mutating func append(_ bytes: [UInt8]) -> [String] {
        var lines: [String] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                lines.append(Self.decode(pending))
                pending.removeAll(keepingCapacity: true)
            } else {
                pending.append(byte)
                if pending.count >= maximumLineLength {
                    lines.append(Self.decode(pending))
                    pending.removeAll(keepingCapacity: true)
                }
            }
        }
        return lines
    }

    /// The unterminated last line, if any.
    mutating func finish() -> String? {
        guard !pending.isEmpty else { return nil }
        defer { pending.removeAll() }
        return Self.decode(pending)
    }

    private static func decode(_ bytes: [UInt8]) -> String {
        let line = bytes.last == UInt8(ascii: "\r") ? bytes.dropLast() : bytes[...]
        return String(decoding: line, as: UTF8.self)
    }
}
