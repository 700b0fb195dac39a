internal import AccountsService
internal import Foundation
internal import Hummingbird
internal import Logging
internal import LoopLogging
internal import LoopMetrics
internal import LoopPersistence
internal import LoopPostgres
internal import LoopRuntime
internal import LoopServiceLifecycle
internal import Metrics
internal import Prometheus
internal import ServiceLifecycle
internal import UnixSignals

/// `accounts-service [--port N] [--host ADDRESS] [--store DIR | --postgres CONNINFO --node NAME | --memory]`
///
/// Serves the accounts API until SIGTERM or SIGINT, then stops gracefully: the HTTP server finishes
/// the requests it has, the accounts record what they took, the store closes, and the accounts'
/// report is logged; exit status 0. It prints `listening on HOST:PORT` once it accepts connections.
///
/// With `--postgres`, the process is a node of a cluster: every process started with the same
/// database shares the accounts, each owning some of their shards, and answers for any account.
/// `--node` names the node: unique in the cluster, and the same when the process is restarted.
struct Options {
    var host = "127.0.0.1"
    var port = 8080
    var store = "accounts-data"
    var postgres: String?
    var node: String?
    var memory = false

    /// The cluster's database and this node's name, given together (`--postgres` and `--node`).
    var cluster: (conninfo: String, node: String)? {
        guard let postgres, let node else { return nil }
        return (postgres, node)
    }

    static let usage =
        "usage: accounts-service [--port N] [--host ADDRESS] [--store DIR | --postgres CONNINFO --node NAME | --memory]"

    init(_ arguments: [String]) throws(UsageError) {
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--memory": memory = true
            case "--port", "--host", "--store", "--postgres", "--node":
                guard let value = rest.popFirst() else { throw UsageError("\(argument) needs a value") }
                switch argument {
                case "--port":
                    guard let port = Int(value), (0...65_535).contains(port) else {
                        throw UsageError("--port takes a number from 0 to 65535")
                    }
                    self.port = port
                case "--host": host = value
                case "--store": store = value
                case "--node": node = value
                default: postgres = value
                }
            default: throw UsageError("unknown argument \(argument)")
            }
        }
        // Where the accounts live is one choice: `--memory` by mistake must not silently lose data.
        let stores = arguments.filter { ["--store", "--postgres", "--memory"].contains($0) }
        guard stores.count <= 1 else {
            throw UsageError("give one of --store, --postgres and --memory, once")
        }
        guard node == nil || postgres != nil else { throw UsageError("--node names a node of --postgres's cluster") }
        if postgres != nil {
            // The name is the node's identity in the cluster, kept across its restarts (a new name at each
            // start would leave a row behind in the nodes table after each crash).
            guard let node else { throw UsageError("--postgres needs --node NAME, unique in the cluster") }
            let allowed = node.unicodeScalars.allSatisfy {
                $0.isASCII
                    && ($0.properties.isAlphabetic || $0.properties.numericType != nil
                        || "-_.".unicodeScalars.contains($0))
            }
            guard (1...40).contains(node.count), allowed else {
                throw UsageError("--node takes 1 to 40 letters, digits, '-', '_' or '.'")
            }
        }
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func serve(_ options: Options) async throws {
    var logger = Logger(label: "accounts-service")
    logger.logLevel = .info
    let registry = PrometheusCollectorRegistry()
    let factory = PrometheusMetricsFactory(registry: registry)
    MetricsSystem.bootstrap(factory)
    let observer = MulticastLoopGroupObserver<String, Account.Event, Account.Effect>([
        SwiftMetricsObserver<String, Account.Event, Account.Effect>(factory: factory),
        LoggingObserver<String, Account.Event, Account.Effect>(logger: logger),
    ])
    let accounts: any Accounts
    var services: [any Service] = []
    if options.memory {
        let memory = MemoryAccounts(observer: observer)
        services.append(RunnableService(memory.group, name: "accounts", logger: logger))
        accounts = memory
    } else if let (conninfo, name) = options.cluster {
        let cluster = try await ClusterAccounts(connecting: conninfo, name: name)
        // What the node rides out (a lost session, an account whose records do not decode) is logged.
        let node = cluster.node.runnable { [logger] failure in
            logger.warning("effectloop cluster node failure", metadata: ["effectloop.failure": "\(failure)"])
        }
        services.append(RunnableService(node, name: "accounts", logger: logger))
        accounts = cluster
    } else {
        try FileManager.default.createDirectory(atPath: options.store, withIntermediateDirectories: true)
        let file = try FileEventStore(directory: options.store)
        services.append(ClosingService("file store") { await file.close() })
        let durable = DurableAccounts(store: file, observer: observer)
        services.append(RunnableService(durable.group, name: "accounts", logger: logger))
        accounts = durable
    }
    let router = AccountsServer.router(accounts: accounts, metrics: registry)
    let app = Application(
        router: router,
        configuration: ApplicationConfiguration(address: .hostname(options.host, port: options.port)),
        onServerRunning: { channel in
            let port = channel.localAddress?.port ?? options.port
            FileHandle.standardOutput.write(Data("listening on \(options.host):\(port)\n".utf8))
        },
        logger: logger
    )
    // Shut down in reverse: the HTTP server first (it finishes the requests it has), then the
    // accounts (they record what they took), then the store.
    services.append(app)
    var configuration = ServiceGroupConfiguration(
        services: services.map { .init(service: $0) },
        gracefulShutdownSignals: [.sigterm, .sigint],
        cancellationSignals: [],
        logger: logger
    )
    // Orchestrators wait about 30 s after SIGTERM before SIGKILL: a graceful shutdown still under way
    // after 25 s (a client holding a connection open, a store that hangs) is escalated to cancellation,
    // which every service here honours at once.
    configuration.maximumGracefulShutdownDuration = .seconds(25)
    let group = ServiceGroup(configuration: configuration)
    try await group.run()
}

do {
    try await serve(try Options(Array(CommandLine.arguments.dropFirst())))
} catch let error as UsageError {
    FileHandle.standardError.write(Data("accounts-service: \(error)\n\(Options.usage)\n".utf8))
    exit(64)
} catch {
    FileHandle.standardError.write(Data("accounts-service: \(error)\n".utf8))
    exit(1)
}
