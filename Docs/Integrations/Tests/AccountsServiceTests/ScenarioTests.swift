import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The example service as a real process under load, with a real HTTP client: 8 clients, each
/// depositing into its own account under a request id per deposit, retrying what got no answer
/// (with the same id) until it is answered. Mid-load the service is killed with SIGKILL, or stopped
/// with SIGTERM, and started again on the same store. At the end, every account holds exactly the sum
/// of its deposits (none lost, none applied twice), and every answer a client got was the running sum
/// at that deposit (so nothing it acknowledged was lost or repeated afterwards).
@Suite(.serialized) struct ScenarioTests {
    static let clients = 8
    static let depositsPerClient = 100

    /// What the clients share with the test: the port of the service now running (0: none), how many
    /// deposits were answered, how many answers were 503 (the service unavailable), and every answer's
    /// balance.
    final class Load: Sendable {
        let port = Atomic<Int>(0)
        /// The port of a second process of the service (a second node of a cluster), 0 for none: the
        /// odd-numbered clients ask it while it runs.
        let second = Atomic<Int>(0)
        let answered = Atomic<Int>(0)
        let unavailable = Atomic<Int>(0)
        /// Set when the test ends, however it ends: the clients give up.
        let over = Atomic<Bool>(false)
        let balances = Mutex<[Int: [Int]]>([:])
        let problems = Mutex<[String]>([])
    }

    /// Client `client`'s deposit number `number` (of `number`), under its own request id.
    static func deposit(port: Int, client: Int, number: Int) -> HTTP.Answer? {
        HTTP.request(
            port: port,
            "POST",
            "/accounts/client-\(client)/deposit",
            headers: [("Idempotency-Key", "client-\(client)-deposit-\(number)")],
            body: Array(#"{"amount": \#(number)}"#.utf8)
        )
    }

    /// One client: deposits 1, 2, ..., n into its account, each under its own request id; a deposit
    /// without an answer (the service is down, or answers 503 or 504) is sent again with the same id.
    static func client(_ index: Int, _ load: Load) {
        var balances: [Int] = []
        for number in 1...depositsPerClient {
            while true {
                if load.over.load(ordering: .relaxed) { return }
                let second = index % 2 == 1 ? load.second.load(ordering: .relaxed) : 0
                let port = second > 0 ? second : load.port.load(ordering: .relaxed)
                guard port > 0, let answer = deposit(port: port, client: index, number: number) else {
                    usleep(5_000)
                    continue
                }
                if answer.status == 503 || answer.status == 504 {
                    if answer.status == 503 { load.unavailable.add(1, ordering: .relaxed) }
                    usleep(5_000)
                    continue
                }
                guard answer.status == 200, let balance = answer.integer("balance") else {
                    load.problems.withLock { $0.append("client \(index) deposit \(number): \(answer)") }
                    return
                }
                balances.append(balance)
                load.answered.add(1, ordering: .relaxed)
                break
            }
        }
        load.balances.withLock { $0[index] = balances }
    }

    /// Starts the clients, and returns once a third of their deposits are answered; the test fails if a
    /// client reported a problem first.
    static func startClients(_ load: Load) async throws -> Task<Void, Never> {
        let clients = Task { await onThreads(Self.clients) { Self.client($0, load) } }
        while load.answered.load(ordering: .relaxed) < Self.clients * Self.depositsPerClient / 3
            && load.problems.withLock({ $0.isEmpty })
        {
            try await Task.sleep(for: .milliseconds(5))
        }
        try #require(load.problems.withLock { $0 }.isEmpty, "\(load.problems.withLock { $0 })")
        return clients
    }

    /// Stops `service` with `disruption` while the load runs. A graceful stop (SIGTERM) must exit 0 with
    /// the accounts' report, drained, and no request refused as unavailable (the HTTP server stops before
    /// the accounts, which finish its requests).
    static func disrupt(_ service: ServiceProcess, with disruption: Int32, _ load: Load) async throws {
        service.signal(disruption)
        let status = try await service.exitStatus()
        if disruption == SIGTERM {
            #expect(status == 0, "\(service.output)")
            #expect(load.unavailable.load(ordering: .relaxed) == 0)
            #expect(service.output.contains("effectloop part stopped"), "\(service.output)")
            #expect(service.output.contains("effectloop.ending=drained"), "\(service.output)")
        } else {
            #expect(status == 128 + SIGKILL)
        }
        let total = Self.clients * Self.depositsPerClient
        #expect(load.answered.load(ordering: .relaxed) < total, "the load ended before the disruption")
    }

    /// Each client's answers, in order, when nothing is lost or applied twice: 1, 1+2, 1+2+3, ...
    static let runningSums = (1...depositsPerClient).map { $0 * ($0 + 1) / 2 }

    /// Once the load is over: every client's answers were the running sums, its account (read from the
    /// service at `port`) holds the sum of its deposits, and a retry of an answered deposit gets its
    /// recorded answer and applies nothing.
    static func expectEveryAccountRight(asking port: Int, _ load: Load) {
        #expect(load.problems.withLock { $0 }.isEmpty, "\(load.problems.withLock { $0 })")
        for index in 0..<Self.clients {
            #expect(load.balances.withLock { $0[index] } == runningSums, "client \(index)'s answers")
            let account = HTTP.request(port: port, "GET", "/accounts/client-\(index)")
            #expect(account?.integer("balance") == runningSums.last, "client \(index)'s account")
            let retry = Self.deposit(port: port, client: index, number: 1)
            #expect(retry?.status == 200 && retry?.integer("balance") == 1, "\(String(describing: retry))")
        }
    }

    @Test(.timeLimit(.minutes(5)), arguments: [SIGKILL, SIGTERM])
    func everyAcknowledgedDepositSurvivesAndNoneIsAppliedTwice(disruption: Int32) async throws {
        let directory = NSTemporaryDirectory() + "accounts-scenario-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/store"
        let log = directory + "/service.log"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let load = Load()
        defer { load.over.store(true, ordering: .relaxed) }
        var service = try ServiceProcess(["--store", store], log: log)
        load.port.store(
            try #require(await service.port(), "the service did not start: \(service.output)"),
            ordering: .relaxed
        )

        let clients = try await Self.startClients(load)
        load.port.store(0, ordering: .relaxed)
        try await Self.disrupt(service, with: disruption, load)
        service = try ServiceProcess(["--store", store], log: log)
        load.port.store(
            try #require(await service.port(), "the service did not restart: \(service.output)"),
            ordering: .relaxed
        )
        await clients.value
        let port = load.port.load(ordering: .relaxed)
        Self.expectEveryAccountRight(asking: port, load)
        let after = HTTP.request(port: port, "GET", "/accounts/client-0")
        #expect(after?.integer("balance") == Self.runningSums.last)
        service.signal(SIGTERM)
        #expect(try await service.exitStatus() == 0)
    }

    /// Where the accounts live is one choice: two (a `--memory` given by mistake beside `--store`) is a
    /// usage error, not a service that silently keeps nothing.
    @Test(.timeLimit(.minutes(2))) func twoStoresAreAUsageError() async throws {
        let directory = NSTemporaryDirectory() + "accounts-usage-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let service = try ServiceProcess(["--store", directory + "/store", "--memory"], log: directory + "/log")
        #expect(try await service.exitStatus() == 64)
        #expect(service.output.contains("give one of --store, --postgres and --memory"), "\(service.output)")
    }

    /// Bad input over real HTTP: each gets its 4xx, and none records anything.
    @Test(.timeLimit(.minutes(2))) func badInputGets4xxAndRecordsNothing() async throws {
        let directory = NSTemporaryDirectory() + "accounts-bad-input-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let service = try ServiceProcess(["--store", directory + "/store"], log: directory + "/service.log")
        let port = try #require(await service.port(), "the service did not start: \(service.output)")
        let deposit = "/accounts/alice/deposit"
        let cases: [(String, String, [(String, String)], [UInt8]?, Int)] = [
            (
                "POST", deposit, [], Array(repeating: UInt8(ascii: " "), count: 5_000) + Array(#"{"amount":1}"#.utf8),
                413
            ),
            ("POST", deposit, [], Array("not json".utf8), 400),
            ("POST", deposit, [], [0x7B, 0xFF, 0x7D], 400),
            ("POST", deposit, [], Array(#"{"amount": 99999999999999999999999}"#.utf8), 400),
            ("POST", deposit, [], Array(#"{"amount": 0}"#.utf8), 422),
            (
                "POST", deposit, [("Idempotency-Key", String(repeating: "k", count: 300))],
                Array(#"{"amount":1}"#.utf8), 400
            ),
            ("POST", "/accounts/..%2Fetc/deposit", [], Array(#"{"amount":1}"#.utf8), 400),
            ("POST", "/accounts/al%20ice/deposit", [], Array(#"{"amount":1}"#.utf8), 400),
        ]
        for (method, path, headers, body, expected) in cases {
            let answer = await Task.detached { HTTP.request(port: port, method, path, headers: headers, body: body) }
                .value
            #expect(
                answer?.status == expected,
                "\(method) \(path) \(body.map { $0.count } ?? 0) bytes: \(String(describing: answer))"
            )
        }
        // No account processed an event: the series of processed events does not exist yet.
        let before = HTTP.request(port: port, "GET", "/metrics")
        #expect(before?.status == 200 && before?.body.contains("effectloop_events_processed_total") == false)
        // The HTTP metrics count every answer, the body limit's 413 included.
        let counted = before?.body.split(separator: "\n").filter { $0.hasPrefix("hb_requests{") } ?? []
        #expect(counted.contains { $0.contains(#"http_response_status_code="413""#) }, "\(counted)")
        #expect(counted.contains { $0.contains(#"http_response_status_code="422""#) }, "\(counted)")
        let account = HTTP.request(port: port, "GET", "/accounts/alice")
        #expect(account?.status == 200 && account?.integer("balance") == 0, "\(String(describing: account))")
        // Good input that the account refuses is recorded (and shows in the series): the check above can
        // tell the two apart.
        let refused = HTTP.request(port: port, "POST", "/accounts/alice/withdraw", body: Array(#"{"amount":1}"#.utf8))
        #expect(refused?.status == 409 && refused?.integer("balance") == 0, "\(String(describing: refused))")
        let after = HTTP.request(port: port, "GET", "/metrics")
        #expect(after?.body.contains("effectloop_events_processed_total") == true, "\(String(describing: after))")
        service.signal(SIGTERM)
        #expect(try await service.exitStatus() == 0)
    }
}
