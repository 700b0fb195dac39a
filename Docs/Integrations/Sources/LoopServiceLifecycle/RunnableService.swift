public import Logging
internal import LoopLogging
public import LoopRuntime
public import ServiceLifecycle

/// A swift-service-lifecycle `Service` that runs any EffectLoop part: a `Loop`, a `LoopGroup`, a
/// `LoopStore`, a `DurableLoop`, a `DurableLoopGroup` or a `ClusterNode`.
///
/// - The group's graceful shutdown stops the part gracefully (`stop(gracePeriod:)`): it takes no new
///   events, processes what it took, and gives its effects `gracePeriod` to finish.
/// - A cancellation (a signal of the group's `cancellationSignals`, or the end of its
///   `maximumGracefulShutdownDuration`) makes the part return at once, its effects cancelled.
/// - When the part has stopped, its report is logged at `info` (or `warning` if it did not drain),
///   with the counts in the metadata.
///
/// ```swift
/// let group = ServiceGroup(
///     services: [RunnableService(loop, logger: logger)],
///     gracefulShutdownSignals: [.sigterm, .sigint],
///     logger: logger
/// )
/// try await group.run()
/// ```
public struct RunnableService<Part: Runnable>: Service, CustomStringConvertible {
    /// The part it runs.
    public let part: Part
    /// How long the part's effects get to finish after a graceful shutdown begins.
    public let gracePeriod: Duration
    private let name: String
    private let logger: Logger?

    /// Creates a service running `part`.
    ///
    /// - Parameters:
    ///   - part: the loop, group, store or node to run.
    ///   - name: how the log calls it (`effectloop.service` in the metadata).
    ///   - gracePeriod: what a graceful shutdown gives the part's effects; keep it under the group's
    ///     `maximumGracefulShutdownDuration`, so the report is always written.
    ///   - logger: where its report is logged when it stops; `nil` logs nothing.
    public init(_ part: Part, name: String? = nil, gracePeriod: Duration = .seconds(10), logger: Logger? = nil) {
        self.part = part
        self.name = name ?? "\(Part.self)"
        self.gracePeriod = gracePeriod
        self.logger = logger
    }

    /// The part's name.
    public var description: String { name }

    /// Runs the part until the group shuts down gracefully or is cancelled; logs its report.
    ///
    /// A graceful shutdown that comes before the part ran stops it for good: it never runs, and this
    /// returns without an error.
    public func run() async throws {
        let (part, gracePeriod) = (self.part, self.gracePeriod)
        let report: LoopReport
        do {
            report = try await withGracefulShutdownHandler {
                try await part.run()
            } onGracefulShutdown: {
                part.stop(gracePeriod: gracePeriod)
            }
        } catch let error as LoopError where error == .alreadyStopped {
            logger?.info("effectloop part stopped before it ran", metadata: ["effectloop.service": "\(name)"])
            return
        }
        guard let logger else { return }
        var metadata = report.logMetadata
        metadata["effectloop.service"] = "\(name)"
        logger.log(
            level: report.ending == .drained ? .info : .warning,
            "effectloop part stopped",
            metadata: metadata
        )
    }
}

/// A `Service` that closes something (an event store, a connection pool) once the group shuts down:
/// put it **first** in the group's services, so it is shut down last, after the loops that use it.
///
/// ```swift
/// let store = try FileEventStore(directory: path)
/// let services: [any Service] = [ClosingService("store") { await store.close() }, RunnableService(group)]
/// ```
public struct ClosingService: Service, CustomStringConvertible {
    private let name: String
    private let close: @Sendable () async -> Void

    /// Creates a service that calls `close` when the group shuts down.
    public init(_ name: String, close: @escaping @Sendable () async -> Void) {
        self.name = name
        self.close = close
    }

    /// What it closes.
    public var description: String { name }

    /// Waits for the group's graceful shutdown (or cancellation), then closes.
    public func run() async throws {
        // Throws only when the task is cancelled: closing is due then too.
        try? await gracefulShutdown()
        await close()
    }
}
