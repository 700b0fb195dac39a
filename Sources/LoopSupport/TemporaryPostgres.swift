internal import EventSources
internal import LoopRuntime
internal import Synchronization

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// A PostgreSQL server for tests and benchmarks, started by the process that needs it: `initdb` in a
/// temporary directory, listening only on a Unix socket inside it (no TCP port), stopped when the
/// process exits. If the process dies without exiting (a crash, `kill -9`), a watchdog started with the
/// server stops it within a second, so no server outlives its tests.
///
/// ```swift
/// let server = try await TemporaryPostgres.shared()
/// let store = try await PostgresEventStore(connecting: try await server.createDatabase())
/// ```
///
/// Set `EFFECTLOOP_POSTGRES` to a conninfo (`host=... user=...`, no `dbname`) to use an existing server
/// instead; its user must be allowed to create databases. As root, the server runs as the `postgres`
/// user (`initdb` refuses root). Needs PostgreSQL's server executables (Debian: `postgresql`).
///
/// Every call that runs an executable (`initdb`, `pg_ctl`, `psql`) is `async` and waits for it on a thread
/// of its own, never on one of Swift's concurrency pool: the pool has one thread per processor, and a test
/// blocked there in `initdb` starves every other test of its process until their time limits pass.
package final class TemporaryPostgres: Sendable {
    /// Why no server could be had: a sentence saying what to install or set.
    package struct Unavailable: Error, CustomStringConvertible, Sendable {
        /// What went wrong.
        package var description: String
    }

    /// The conninfo of the server, without a database name: add ` dbname=NAME`.
    package let conninfo: String
    /// The server's directory, when this process started it.
    package let directory: String?
    private let stopCommand: [String]?
    /// `pg_ctl` and its arguments up to the action, for a server this process started.
    private let control: [String]?
    private let databases = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    /// A `Locked`, not a `Mutex`: the thread sanitizer sees its lock (see `Locked`).
    private static let sharedServer = Locked<Result<TemporaryPostgres, Unavailable>?>(nil)

    /// The server this process shares between its tests: `EFFECTLOOP_POSTGRES`'s, or one started on
    /// first use with `fsync` off (a test's crash safety is not the server's).
    package static func shared() async throws(Unavailable) -> TemporaryPostgres {
        try await offThePool { () throws(Unavailable) in try startingShared() }
    }

    /// ``shared()``, on the calling thread (which waits for another caller's start under the lock).
    private static func startingShared() throws(Unavailable) -> TemporaryPostgres {
        let result = sharedServer.withLock { shared -> Result<TemporaryPostgres, Unavailable> in
            if let shared { return shared }
            let result: Result<TemporaryPostgres, Unavailable>
            if let existing = environment("EFFECTLOOP_POSTGRES"), !existing.isEmpty {
                result = .success(TemporaryPostgres(existing: existing))
            } else {
                do throws(Unavailable) {
                    let server = try TemporaryPostgres(Self.start(durable: false, listening: nil))
                    registerExitStop(server)
                    result = .success(server)
                } catch {
                    result = .failure(error)
                }
            }
            shared = result
            return result
        }
        return try result.get()
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: value, count: strlen(value)), as: UTF8.self)
    }

    private init(existing: String) {
        conninfo = existing
        directory = nil
        stopCommand = nil
        control = nil
    }

    /// What a server this process started is known by.
    private struct Started: Sendable {
        let conninfo: String
        let directory: String
        let stopCommand: [String]
        let control: [String]
    }

    private init(_ started: Started) {
        conninfo = started.conninfo
        directory = started.directory
        stopCommand = started.stopCommand
        control = started.control
    }

    /// Starts a new server. `durable`: with `fsync` and synchronous commit on, as a production server
    /// runs (for benchmarks); otherwise `fsync` is off. `listening`: an IP address to accept TCP
    /// connections on as well (port 5432, any client, without a password), for tests that cut a network
    /// link; by default the server listens on its Unix socket only. Stop it with ``stop()``; the watchdog
    /// stops it if this process dies first.
    package convenience init(durable: Bool, listening address: String? = nil) async throws(Unavailable) {
        self.init(
            try await offThePool { () throws(Unavailable) in try Self.start(durable: durable, listening: address) }
        )
    }

    /// Runs `initdb` and `pg_ctl start`, and starts the watchdog, on the calling thread.
    private static func start(durable: Bool, listening address: String?) throws(Unavailable) -> Started {
        guard let bin = Self.binDirectory() else {
            throw Unavailable(
                description: "PostgreSQL's server executables (initdb, pg_ctl) are not installed: run `make deps`, "
                    + "or set EFFECTLOOP_POSTGRES to the conninfo of a server"
            )
        }
        guard let directory = Self.temporaryName("/tmp/effectloop-pg-XXXXXX", directory: true) else {
            throw Unavailable(description: "cannot create a temporary directory (errno \(errno))")
        }
        let asRoot = geteuid() == 0
        // initdb refuses to run as root: as root, the server runs as the `postgres` user.
        let asUser: [String] = asRoot ? ["runuser", "-u", "postgres", "--"] : []
        if asRoot { try Self.run(["chown", "postgres", directory]) }
        let data = directory + "/data"
        var initdb = asUser + ["\(bin)/initdb", "-D", data, "-A", "trust", "-U", "effectloop", "-E", "UTF8"]
        if !durable { initdb.append("--no-sync") }
        let options =
            "-k \(directory) -c listen_addresses='\(address ?? "")' -c max_connections=500"
            + (durable ? "" : " -c fsync=off")
        do throws(Unavailable) {
            try Self.run(initdb)
            if address != nil {
                try Self.run(["/bin/sh", "-c", "echo 'host all all 0.0.0.0/0 trust' >> \(data)/pg_hba.conf"])
            }
            try Self.run(
                asUser + [
                    "\(bin)/pg_ctl", "-D", data, "-l", directory + "/server.log", "-w", "-t", "60", "-o", options,
                    "start",
                ]
            )
        } catch {
            // pg_ctl may have started the server before it gave up waiting for it.
            _ = try? Self.run(asUser + ["\(bin)/pg_ctl", "-D", data, "stop", "-m", "immediate"])
            Self.remove(directory)
            throw error
        }
        let stop =
            (asUser + ["\(bin)/pg_ctl", "-D", data, "stop", "-m", "immediate"]).joined(separator: " ")
            + " >/dev/null 2>&1; rm -rf \(directory)"
        // The watchdog runs as this process's user, which may always signal it (`kill -0`).
        _ = try? Self.run([
            "setsid", "-f", "/bin/sh", "-c", "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; \(stop)",
        ])
        return Started(
            conninfo: "host=\(directory) user=effectloop",
            directory: directory,
            stopCommand: ["/bin/sh", "-c", stop],
            control: asUser + [
                "\(bin)/pg_ctl", "-D", data, "-l", directory + "/server.log", "-w", "-t", "60", "-o", options,
            ]
        )
    }

    /// Restarts the server this process started, as an operator's `pg_ctl restart -m fast` does: every
    /// session is ended, and the server accepts connections again once this returns.
    ///
    /// - Throws: ``Unavailable`` for a server this process did not start, or when `pg_ctl` fails.
    package func restart() async throws(Unavailable) {
        try await self.control(["restart", "-m", "fast"])
    }

    /// Shuts the server this process started down (`pg_ctl stop -m fast`), keeping its data:
    /// ``startAgain()`` brings it back, ``stop()`` removes it.
    package func shutDown() async throws(Unavailable) {
        try await self.control(["stop", "-m", "fast"])
    }

    /// Starts the server again after ``shutDown()``.
    package func startAgain() async throws(Unavailable) {
        try await self.control(["start"])
    }

    private func control(_ action: [String]) async throws(Unavailable) {
        guard let control, !stopped.load(ordering: .relaxed) else {
            throw Unavailable(description: "the server was not started by this process, or is stopped")
        }
        _ = try await Self.runOffThePool(control + action)
    }

    /// Creates an empty database (in `encoding`, or the server's) and returns its conninfo.
    package func createDatabase(encoding: String? = nil) async throws(Unavailable) -> String {
        let name = "effectloop_\(getpid())_\(databases.add(1, ordering: .relaxed).newValue)"
        // Another encoding than the server's needs the empty template and a locale that takes any.
        let options = encoding.map { " ENCODING '\($0)' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'" } ?? ""
        _ = try await Self.runOffThePool(
            Self.psql(conninfo + " dbname=postgres", "CREATE DATABASE \(name)" + options)
        )
        return conninfo + " dbname=\(name)"
    }

    /// Stops the server this process started and removes its directory (nothing for an existing one).
    /// Synchronous, so that a `defer` can call it: `pg_ctl stop -m immediate` returns within moments.
    package func stop() {
        guard let stopCommand, !stopped.exchange(true, ordering: .relaxed) else { return }
        _ = try? Self.run(stopCommand)
    }

    /// Runs `sql` in the database `conninfo` names, with `psql`; its output.
    @discardableResult
    package static func psql(_ conninfo: String, sql: String) async throws(Unavailable) -> String {
        try await runOffThePool(psql(conninfo, sql))
    }

    /// ``run(_:)`` on a thread of its own.
    private static func runOffThePool(_ command: [String]) async throws(Unavailable) -> String {
        try await offThePool { () throws(Unavailable) in try run(command) }
    }

    static func psql(_ conninfo: String, _ sql: String) -> [String] {
        ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql]
    }

    private static func binDirectory() -> String? {
        var candidates: [String] = []
        if let configured = try? run(["pg_config", "--bindir"]) {
            candidates.append(String(configured.filter { !$0.isWhitespace }))
        }
        if let versions = opendir("/usr/lib/postgresql") {
            var names: [String] = []
            while let entry = readdir(versions) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) {
                    String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
                }
                if !name.hasPrefix(".") { names.append(name) }
            }
            closedir(versions)
            candidates += names.sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }.map { "/usr/lib/postgresql/\($0)/bin" }
        }
        return candidates.first { access($0 + "/pg_ctl", X_OK) == 0 }
    }

    /// Creates a directory or an empty file from `template` (ending in `XXXXXX`); its path.
    private static func temporaryName(_ template: String, directory: Bool) -> String? {
        var bytes = Array(template.utf8CString)
        let made = bytes.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            if directory { return mkdtemp(base) != nil }
            let file = mkstemp(base)
            if file >= 0 { close(file) }
            return file >= 0
        }
        guard made else { return nil }
        return String(decoding: bytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func remove(_ directory: String) {
        _ = try? run(["rm", "-rf", directory])
    }

    /// Runs `command` (found on `PATH`) and waits; its output, or an error with it.
    @discardableResult
    static func run(_ command: [String]) throws(Unavailable) -> String {
        guard let path = temporaryName("/tmp/effectloop-out-XXXXXX", directory: false) else {
            throw Unavailable(description: "cannot create a temporary file (errno \(errno))")
        }
        let file = open(path, O_RDWR | O_CLOEXEC)
        guard file >= 0 else { throw Unavailable(description: "cannot open \(path) (errno \(errno))") }
        defer {
            close(file)
            unlink(path)
        }
        var spawned: Int32 = 0
        guard
            let pid = ChildProcess.spawn(
                "/usr/bin/env",
                ["/usr/bin/env"] + command,
                output: .descriptor(file),
                failure: &spawned
            )
        else {
            throw Unavailable(description: "cannot start \(command.joined(separator: " ")) (errno \(spawned))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        lseek(file, 0, SEEK_SET)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(file, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            output += buffer.prefix(count)
        }
        let text = String(decoding: output, as: UTF8.self)
        // Zero: it exited normally (no signal) with status 0.
        guard status == 0 else {
            throw Unavailable(description: "\(command.joined(separator: " ")) failed (status \(status)): \(text)")
        }
        return text
    }
}

/// The shared server, stopped when the process exits.
private let exitStop = Locked<TemporaryPostgres?>(nil)

private func registerExitStop(_ server: TemporaryPostgres) {
    exitStop.withLock { $0 = server }
    atexit(stopAtExit)
}

private func stopAtExit() {
    exitStop.withLock { $0 }?.stop()
}

/// Runs `work`, which blocks (on a child process, or on a lock such work holds), on an operating-system
/// thread of its own, and waits for its result without holding a thread of Swift's concurrency pool.
package func offThePool<T: Sendable, Failure: Error>(
    _ work: @escaping @Sendable () throws(Failure) -> T
) async throws(Failure) -> T {
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, Failure>, Never>) in
        OSThread { continuation.resume(returning: Result { () throws(Failure) -> T in try work() }) }.detach()
    }
    return try result.get()
}
