import Foundation
import LoopTesting
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ScenarioTests {
    /// Two processes of the service on one PostgreSQL database (`--postgres`), each a node owning some of
    /// the accounts' shards and answering for every account. The even-numbered clients ask node a, the
    /// odd-numbered ones node b. Mid-load node b is killed with SIGKILL, or stopped with SIGTERM; its
    /// clients go on with node a, which takes b's shards and the requests b left in the inbox, and
    /// retries under the same request id get the answers that were recorded. At the end every account
    /// holds exactly the sum of its deposits and every answer a client got was the running sum.
    @Test(.timeLimit(.minutes(5)), arguments: [SIGKILL, SIGTERM])
    func aClusterOfTwoServicesLosesNoDepositWhenOneGoes(disruption: Int32) async throws {
        let conninfo = try await ThrowawayPostgres.database()
        let directory = NSTemporaryDirectory() + "accounts-cluster-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let load = Load()
        defer { load.over.store(true, ordering: .relaxed) }
        let a = try ServiceProcess(["--postgres", conninfo, "--node", "a"], log: directory + "/a.log")
        let b = try ServiceProcess(["--postgres", conninfo, "--node", "b"], log: directory + "/b.log")
        let portA = try #require(await a.port(), "node a did not start: \(a.output)")
        let portB = try #require(await b.port(), "node b did not start: \(b.output)")
        load.port.store(portA, ordering: .relaxed)
        load.second.store(portB, ordering: .relaxed)

        let clients = try await Self.startClients(load)
        // From here b's clients ask a; what b was asked and did not answer, they ask a again. A graceful
        // stop of b finishes what it took and hands its shards over.
        load.second.store(0, ordering: .relaxed)
        try await Self.disrupt(b, with: disruption, load)
        await clients.value
        // Balances as recorded, read by a for the accounts b owned too.
        Self.expectEveryAccountRight(asking: portA, load)
        a.signal(SIGTERM)
        #expect(try await a.exitStatus() == 0, "\(a.output)")
    }

    /// `--postgres` and `--node` go together, and a node's name is plain: anything else is a usage error.
    @Test(
        .timeLimit(.minutes(2)),
        arguments: [
            (["--node", "a"], "--node names a node of --postgres's cluster"),
            (["--postgres", "dbname=x"], "--postgres needs --node NAME"),
            (["--postgres", "dbname=x", "--node", ""], "--node takes 1 to 40 letters"),
            (["--postgres", "dbname=x", "--node", "a b"], "--node takes 1 to 40 letters"),
            (["--postgres", "dbname=x", "--node", String(repeating: "n", count: 41)], "--node takes 1 to 40 letters"),
        ]
    )
    func aClusterNodeNeedsAPlainName(arguments: [String], message: String) async throws {
        let directory = NSTemporaryDirectory() + "accounts-usage-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let service = try ServiceProcess(arguments, log: directory + "/log")
        #expect(try await service.exitStatus() == 64)
        #expect(service.output.contains(message), "\(service.output)")
    }
}
