#if os(Linux)
internal import LoopSupport

/// A PostgreSQL server for the tests of a service built on `LoopPostgres`, started by the test process
/// itself: `initdb` in a temporary directory, listening on a Unix socket inside it only (no TCP port),
/// `fsync` off, one server shared by every test of the process, each test in a database of its own.
/// It stops when the process exits; if the process dies without exiting (a crash, `kill -9`), a watchdog
/// started with it stops it within a second, so no server outlives its tests.
///
/// ```swift
/// let conninfo = try await ThrowawayPostgres.database()
/// let node = try await ClusterNode(connecting: conninfo, name: "node-1", program: Account.program, ...)
/// ```
///
/// The conninfo works from child processes too (a service under test started as a process of its own).
/// Set `EFFECTLOOP_POSTGRES` to the conninfo of an existing server (`host=... user=...`, no `dbname`, a
/// user allowed to create databases) to use it instead. Needs PostgreSQL's server executables (Debian:
/// `postgresql`); as root, the server runs as the `postgres` user (`initdb` refuses root).
public enum ThrowawayPostgres {
    /// Why no server could be had: a sentence saying what to install or set.
    public struct Unavailable: Error, Hashable, Sendable, CustomStringConvertible {
        /// What went wrong.
        public var description: String
    }

    /// Creates an empty database on the process's server (starting the server on first use) and
    /// returns its conninfo, `dbname` included.
    ///
    /// - Throws: ``Unavailable`` when PostgreSQL's programs are missing or the server does not start.
    public static func database() async throws(Unavailable) -> String {
        do {
            return try await TemporaryPostgres.shared().createDatabase()
        } catch {
            throw Unavailable(description: error.description)
        }
    }
}
#endif
