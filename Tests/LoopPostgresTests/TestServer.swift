import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A PostgreSQL server for the tests: a throwaway one this process starts (a temporary directory,
/// listening only on a Unix socket inside it, no TCP port), or the existing one `EFFECTLOOP_POSTGRES`
/// names (a conninfo whose user may create databases). Each test gets a database of its own.
///
/// The throwaway server is stopped when the test process exits; if the process dies first (a crash, a
/// `kill -9`), a watchdog started with the server notices within a second and stops it, so no server
/// outlives its tests.
enum TestServer {
    /// Why the tests cannot have a server.
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    private static let started = Mutex<Result<Server, Unavailable>?>(nil)
    private static let databases = Atomic<Int>(0)

    struct Server: Sendable {
        /// The conninfo of the maintenance database, without `dbname`.
        var base: String
        /// The throwaway server's directory, if this process started it.
        var directory: String?
    }

    /// A conninfo for a new, empty database.
    static func freshDatabase() throws -> String {
        let server = try server()
        let name = "effectloop_test_\(getpid())_\(databases.add(1, ordering: .relaxed).newValue)"
        try run(psql(server.base + " dbname=postgres", "CREATE DATABASE \(name)"))
        return server.base + " dbname=\(name)"
    }

    /// The server, started on first use.
    static func server() throws -> Server {
        try started.withLock { started in
            if let started { return try started.get() }
            let result: Result<Server, Unavailable>
            do {
                result = .success(try start())
            } catch let error as Unavailable {
                result = .failure(error)
            } catch {
                result = .failure(Unavailable(description: "\(error)"))
            }
            started = result
            return try result.get()
        }
    }

    private static func start() throws -> Server {
        if let existing = ProcessInfo.processInfo.environment["EFFECTLOOP_POSTGRES"], !existing.isEmpty {
            return Server(base: existing, directory: nil)
        }
        guard let bin = binDirectory() else {
            throw Unavailable(
                description: "PostgreSQL's server programs (initdb, pg_ctl) are not installed: run `make deps`, "
                    + "or set EFFECTLOOP_POSTGRES to the conninfo of a server"
            )
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("effectloop-pg-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // initdb refuses to run as root: as root, the server runs as the `postgres` user.
        let asUser: [String] = geteuid() == 0 ? ["runuser", "-u", "postgres", "--"] : []
        if geteuid() == 0 { try run(["chown", "postgres", directory]) }
        let data = directory + "/data"
        try run(asUser + ["\(bin)/initdb", "-D", data, "-A", "trust", "-U", "effectloop", "-E", "UTF8", "--no-sync"])
        try run(
            asUser + [
                "\(bin)/pg_ctl", "-D", data, "-l", directory + "/server.log", "-w", "-t", "60",
                "-o", "-k \(directory) -c listen_addresses='' -c fsync=off -c max_connections=200", "start",
            ]
        )
        stopAtExit(directory: directory, bin: bin, asUser: asUser)
        return Server(base: "host=\(directory) user=effectloop", directory: directory)
    }

    /// Stops the server and removes its directory when this process exits, or, through a watchdog
    /// process, within a second of this process dying without exiting.
    private static func stopAtExit(directory: String, bin: String, asUser: [String]) {
        let stop =
            (asUser + ["\(bin)/pg_ctl", "-D", directory + "/data", "stop", "-m", "immediate"]).joined(separator: " ")
            + " >/dev/null 2>&1; rm -rf \(directory)"
        // The watchdog runs as this process's user, which may always signal it (`kill -0`).
        let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; \(stop)"
        _ = try? run(["setsid", "-f", "/bin/sh", "-c", script])
        exitCleanup.withLock { $0 = ["/bin/sh", "-c", stop] }
        atexit(cleanUpAtExit)
    }

    private static func binDirectory() -> String? {
        var candidates: [String] = []
        if let config = try? output(["pg_config", "--bindir"]) {
            candidates.append(config.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        candidates += versions.sorted(by: >).map { "/usr/lib/postgresql/\($0)/bin" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0 + "/pg_ctl") }
    }

    static func psql(_ conninfo: String, _ sql: String) -> [String] {
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql]
    }

    /// Runs `command` (found on PATH) and waits; throws with its output if it fails.
    @discardableResult
    static func run(_ command: [String]) throws -> String {
        try output(command)
    }

    /// Runs `command` through `/usr/bin/env`, its output into a temporary file, and waits for it.
    private static func output(_ command: [String]) throws -> String {
        let log = FileManager.default.temporaryDirectory
            .appendingPathComponent("effectloop-command-\(getpid())-\(UInt64.random(in: 0...UInt64.max))").path
        defer { unlink(log) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let words = ["/usr/bin/env"] + command
        var arguments: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) }
        arguments.append(nil)
        defer { for argument in arguments { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/env", &actions, nil, arguments, environ)
        guard spawned == 0 else {
            throw Unavailable(description: "cannot start \(command.joined(separator: " ")): errno \(spawned)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        // Exited normally with status 0: the low 7 bits (the signal) and the exit code both zero.
        guard status == 0 else {
            throw Unavailable(description: "\(command.joined(separator: " ")) failed (status \(status)): \(text)")
        }
        return text
    }
}

/// The command that stops the throwaway server, run at exit.
private let exitCleanup = Mutex<[String]?>(nil)

private func cleanUpAtExit() {
    guard let command = exitCleanup.withLock({ $0 }) else { return }
    _ = try? TestServer.run(command)
}
