internal import Dispatch
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
/// UTF-8 are replaced, never rejected. A line is never sent in part: a line longer than
/// ``maximumLineLength`` bytes, or one holding a NUL byte, is rejected whole (`invalid` says why, with
/// its line number) and reading resumes at the next newline, so memory stays bounded whatever the
/// input and no crafted line can be cut into a different one. At the end of input a last line without
/// a newline is sent as it is, then `end` if given. When reading fails (a closed descriptor, say), a
/// last line without a newline may be cut short: it is rejected (``InvalidLine/unterminated(line:)``),
/// then `end` is sent and the failure thrown. The descriptor is not closed.
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
    private let invalid: (@Sendable (InvalidLine) -> Event?)?
    private let event: @Sendable (String) -> Event

    /// Creates a source that reads lines from `fileDescriptor`, sends `event` of each, `invalid` of each
    /// line it rejects (nothing, if `invalid` is `nil` or returns `nil`), and `end` at the end of input.
    public init(
        fileDescriptor: Int32,
        end: Event? = nil,
        invalid: (@Sendable (InvalidLine) -> Event?)? = nil,
        event: @escaping @Sendable (String) -> Event
    ) {
        self.fileDescriptor = fileDescriptor
        self.end = end
        self.invalid = invalid
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
        do {
            for try await chunk in chunks {
                for line in splitter.append(chunk) where !(await deliver(line, send)) { return }
                // Only now may the thread read on: a loop that is slow to take lines slows the reading.
                reader.consumed()
            }
        } catch {
            // A failed read ends the input as surely as its end does, but a line it cut short is not
            // sent as a command: it is rejected, then `end` is sent.
            if let last = splitter.finish(cut: true), !(await deliver(last, send)) { throw error }
            if let end { _ = await deliver(end, send) }
            throw error
        }
        if let last = splitter.finish(), !(await deliver(last, send)) { return }
        if let end { _ = await deliver(end, send) }
    }

    /// Sends the event of `line`; `false` when the loop takes no more events and reading should stop.
    private func deliver(_ line: LineSplitter.Line, _ send: Send<Event>) async -> Bool {
        switch line {
        case .text(let text):
            return await deliver(event(text), send)
        case .invalid(let reason):
            guard let rejected = invalid?(reason) else { return true }
            return await deliver(rejected, send)
        }
    }

    /// Sends `event`, waiting for room in a full inbox that lets senders wait; `false` when the loop
    /// takes no more events and reading should stop.
    private func deliver(_ event: Event, _ send: Send<Event>) async -> Bool {
        if case .rejected(let rejection) = await send.waitingForRoom(event),
            rejection != .inboxFull || Task.isCancelled
        {
            return false
        }
        return true
    }
}

/// A line a ``LineSource`` rejected whole, and why.
public enum InvalidLine: Hashable, Sendable, CustomStringConvertible {
    /// Line `line` (counted from 1) was longer than `limit` bytes; none of it was sent.
    case tooLong(line: Int, limit: Int)
    /// Line `line` held a NUL byte, which no text line holds; none of it was sent.
    case containsNUL(line: Int)

    /// The input failed in the middle of line `line`, so it may be cut short; none of it was sent.
    case unterminated(line: Int)

    /// A sentence saying which line and why.
    public var description: String {
        switch self {
        case .unterminated(let line): "line \(line) was cut short by a read error and was ignored"
        case .tooLong(let line, let limit): "line \(line) is longer than \(limit) bytes and was ignored"
        case .containsNUL(let line): "line \(line) contains a NUL byte and was ignored"
        }
    }
}

/// The reason a ``LineSource`` stopped reading.
public enum LineSourceError: Error, Hashable, Sendable {
    /// `read` or `poll` failed with this `errno`.
    case readFailed(errno: Int32)
    /// No thread could be started to read with.
    case threadUnavailable
}

/// Reads chunks from a descriptor on a thread of its own and yields them to a stream, at most
/// ``chunksAhead`` chunks ahead of the reader of the stream (see ``consumed()``), so a slow consumer
/// slows the reading instead of piling chunks up in memory.
final class ChunkReader: Sendable {
    /// How many chunks may wait in the stream, read but not yet consumed.
    static let chunksAhead = 2

    private let fileDescriptor: Int32
    private let continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation
    private let stopped = Atomic<Bool>(false)
    /// Counts the chunks the thread may still read. Made at zero and raised: libdispatch refuses to free
    /// a semaphore whose count is below the one it was made with, as it is when the reader stops.
    private let room = DispatchSemaphore(value: 0)

    init(fileDescriptor: Int32, continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation) {
        self.fileDescriptor = fileDescriptor
        self.continuation = continuation
        for _ in 0..<Self.chunksAhead { room.signal() }
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    /// The consumer is done with one chunk: the thread may read one more.
    func consumed() {
        room.signal()
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
            // Waits for the consumer to take a chunk, checking for a stop every poll interval.
            guard room.wait(timeout: .now() + .milliseconds(Int(timeout))) == .success else { continue }
            var request = pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&request, 1, timeout)
            if ready == 0 || (ready < 0 && errno == EINTR) {
                room.signal()
                continue
            }
            if ready < 0 {
                return continuation.finish(throwing: LineSourceError.readFailed(errno: errno))
            }
            if request.revents & Int16(POLLNVAL) != 0 {
                // Not an open descriptor (standard input closed with `<&-`, say): nothing will come.
                return continuation.finish(throwing: LineSourceError.readFailed(errno: EBADF))
            }
            let count = buffer.withUnsafeMutableBytes { read(fileDescriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                continuation.yield(Array(buffer.prefix(count)))
            } else if count == 0 {
                return continuation.finish()
            } else if errno != EAGAIN && errno != EINTR {
                return continuation.finish(throwing: LineSourceError.readFailed(errno: errno))
            } else {
                room.signal()
            }
        }
        continuation.finish()
    }
}

/// Cuts a byte stream into lines of bounded length, rejecting over-long lines and lines with a NUL
/// byte whole.
struct LineSplitter {
    /// A complete line, or one rejected.
    enum Line: Equatable {
        case text(String)
        case invalid(InvalidLine)
    }

    let maximumLineLength: Int
    private var pending: [UInt8] = []
    private var number = 0
    /// Dropping the rest of an over-long line, up to its newline.
    private var discarding = false
    private var sawNUL = false

    init(maximumLineLength: Int) {
        self.maximumLineLength = maximumLineLength
    }

    /// The lines that `bytes` completes.
    mutating func append(_ bytes: [UInt8]) -> [Line] {
        var lines: [Line] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                lines.append(complete())
            } else if discarding {
                continue
            } else if pending.count >= maximumLineLength {
                discarding = true
                pending.removeAll(keepingCapacity: true)
            } else {
                if byte == 0 { sawNUL = true }
                pending.append(byte)
            }
        }
        return lines
    }

    /// The unterminated last line, if any; rejected whole if the input was `cut` (a read failed).
    mutating func finish(cut: Bool = false) -> Line? {
        guard !pending.isEmpty || discarding else { return nil }
        let line = complete()
        if cut, case .text = line { return .invalid(.unterminated(line: number)) }
        return line
    }

    /// Ends the current line.
    private mutating func complete() -> Line {
        number += 1
        defer {
            pending.removeAll(keepingCapacity: true)
            discarding = false
            sawNUL = false
        }
        if discarding { return .invalid(.tooLong(line: number, limit: maximumLineLength)) }
        if sawNUL { return .invalid(.containsNUL(line: number)) }
        let line = pending.last == UInt8(ascii: "\r") ? pending.dropLast() : pending[...]
        return .text(String(decoding: line, as: UTF8.self))
    }
}
