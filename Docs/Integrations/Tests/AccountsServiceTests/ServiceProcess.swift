import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The built `accounts-service`, run as a real process with its output in a log file. Killed with
/// SIGKILL when released if still running, so no test leaves one behind.
final class ServiceProcess {
    let process: Process
    let log: String
    /// Where this process's output begins in `log` (earlier runs of the test wrote before it).
    let start: UInt64

    static var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("accounts-service").path
    }

    /// Starts the service with `arguments` (and `--port 0`), appending its output to `log`.
    init(_ arguments: [String], log: String) throws {
        self.log = log
        if !FileManager.default.fileExists(atPath: log) {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
        }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        start = output.seekToEndOfFile()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["--port", "0"] + arguments
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        try output.close()
        self.process = process
    }

    /// What it printed so far.
    var output: String {
        guard let file = FileHandle(forReadingAtPath: log) else { return "" }
        defer { try? file.close() }
        try? file.seek(toOffset: start)
        return String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
    }

    /// The port it listens on, once it says so; `nil` if it exits first or says nothing for a minute.
    func port() async throws -> Int? {
        for _ in 0..<6_000 {
            let lines = output.split(separator: "\n").filter { $0.hasPrefix("listening on ") }
            if let last = lines.last, let port = last.split(separator: ":").last.flatMap({ Int($0) }) { return port }
            if !process.isRunning { return nil }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    /// Sends `signal`.
    func signal(_ signal: Int32) {
        if process.isRunning { kill(process.processIdentifier, signal) }
    }

    /// Waits for it to exit; its exit status (128 + the signal for a signal), or `nil` after two minutes.
    func exitStatus() async throws -> Int32? {
        for _ in 0..<12_000 {
            if !process.isRunning {
                return process.terminationReason == .uncaughtSignal
                    ? 128 + process.terminationStatus : process.terminationStatus
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// A minimal HTTP/1.1 client over a blocking socket, one connection per request (`Connection: close`):
/// what the scenario needs, and nothing that could hide what the server does.
enum HTTP {
    /// An answer: its status code and body.
    struct Answer: Sendable {
        var status: Int
        var body: String

        /// The body's integer field `name`, if any.
        func integer(_ name: String) -> Int? {
            guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else {
                return nil
            }
            return (object[name] as? NSNumber)?.intValue
        }
    }

    /// Sends a request to `127.0.0.1:port`; its answer, or `nil` if the connection failed or closed
    /// before a whole answer came (the server died, or is not there yet).
    static func request(
        port: Int,
        _ method: String,
        _ path: String,
        headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) -> Answer? {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return nil }
        defer { close(socket) }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        let bytes = Array((head + "\r\n").utf8) + (body ?? [])
        var sent = 0
        while sent < bytes.count {
            // MSG_NOSIGNAL: a server that went away is an answer of nil, not a SIGPIPE.
            let count = bytes[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return nil }
            sent += count
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            guard count > 0 else { return nil }
            received += buffer.prefix(count)
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let statusLine = text[..<split.lowerBound].prefix { $0 != "\r" }.split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        let headers = text[..<split.lowerBound].lowercased()
        let body = String(text[split.upperBound...])
        // A body shorter than its Content-Length: the connection was cut mid-answer.
        if let length = headers.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") })
            .flatMap({ Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }),
            body.utf8.count < length
        {
            return nil
        }
        return Answer(status: status, body: body)
    }
}

/// Runs `body(index)` for each index on threads of their own (blocking socket calls, kept off Swift's
/// concurrency pool) and waits for all of them.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await withTaskGroup(of: Void.self) { group in
        for index in 0..<count {
            group.addTask {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    Thread {
                        body(index)
                        done.resume()
                    }
                    .start()
                }
            }
        }
    }
}
