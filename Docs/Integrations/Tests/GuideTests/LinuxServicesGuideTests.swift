import EffectHandlers
import EventSources
import Foundation
import Logging
import LoopCore
import LoopLogging
import LoopMetrics
import LoopPersistence
import LoopRuntime
import LoopServiceLifecycle
import LoopTracing
import ServiceLifecycle
import Testing
import UnixSignals

/// The code of `Docs/LinuxServices.md`, compiled here; ``everySwiftBlockOfTheGuideIsCompiledHere()``
/// fails when a block of the guide is not found, line for line, in this file.
enum Guide {
    enum Event: Sendable {
        case shutdownRequested(ProcessSignal)
        case work
    }

    enum Effect: Sendable { case shutDown(Duration) }

    static let program = Program<Int, Event, Effect>(
        first: First(state: 0),
        update: Update { count, event in
            switch event {
            case .shutdownRequested: return [.shutDown(.seconds(5))]
            case .work:
                count += 1
                return []
            }
        }
    )

    static let router = EffectRouter<Effect, Event>()
        .stopLoop(on: { if case .shutDown(let grace) = $0 { grace } else { nil } })

    static func signals(
        program: Program<Int, Event, Effect>,
        router: EffectRouter<Effect, Event>
    ) -> Loop<Int, Event, Effect> {
        let loop = Loop(
            program: program,
            effects: router,
            sources: [SignalSource([.interrupt, .terminate]) { signal in .shutdownRequested(signal) }]
        )
        return loop
    }

    static func reporting(_ loop: Loop<Int, Event, Effect>) async throws {
        let report = try await loop.run()
        print("stopped: \(report)")  // the ending is part of the line
        // events: 1200 sent, 1198 processed, 2 rejected, 0 dropped; effects: 310 started, 305 completed, …
    }

    static func service(
        program: Program<Int, Event, Effect>,
        router: EffectRouter<Effect, Event>,
        directory: String,
        logger: Logger
    ) async throws {
        let store = try FileEventStore(directory: directory)
        let loop = Loop(program: program, effects: router)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    // First in the list, so shut down last: the store outlives the loops that use it.
                    .init(service: ClosingService("store") { await store.close() }),
                    .init(service: RunnableService(loop, name: "jobs", gracePeriod: .seconds(10), logger: logger)),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await group.run()
    }

    static func metrics(program: Program<Int, Event, Effect>, router: EffectRouter<Effect, Event>) -> String {
        let metrics = MetricsObserver<Event, Effect>()
        let loop = Loop(program: program, effects: router, observer: metrics)
        // In the handler of GET /metrics, the body (text/plain; version=0.0.4):
        let body = metrics.render()
        _ = loop
        return body
    }

    static func observers(
        program: Program<Int, Event, Effect>,
        router: EffectRouter<Effect, Event>,
        logger: Logger
    ) -> LoopGroup<String, Int, Event, Effect> {
        let observed = LoopGroup<String, Int, Event, Effect>(
            program: { _ in program },
            effects: router,
            observer: MulticastLoopGroupObserver([
                LoggingObserver<String, Event, Effect>(logger: logger),
                SwiftMetricsObserver<String, Event, Effect>(dimensions: [("loop", "accounts")]),
            ])
        )
        return observed
    }
}

enum RequestID {
    @TaskLocal static var current: String?
}

extension Guide {
    static func scoping(_ router: EffectRouter<Effect, Event>) -> EffectRouter<Effect, Event> {
        let scoped = router.scoped(
            EffectScope<Effect>(
                capture: { RequestID.current },
                sync: { id, _, body in try RequestID.$current.withValue(id) { try body() } },
                async: { id, _, body in try await RequestID.$current.withValue(id) { try await body() } }
            )
        )
        return scoped
    }

    static func tracing(_ router: EffectRouter<Effect, Event>) -> EffectRouter<Effect, Event> {
        let traced = router.scoped(LoopTracing.scope())
        return traced
    }
}

@Suite struct LinuxServicesGuideTests {
    @Test func everySwiftBlockOfTheGuideIsCompiledHere() throws {
        let here = URL(fileURLWithPath: #filePath)
        let root = here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(
            contentsOf: root.deletingLastPathComponent().appendingPathComponent("LinuxServices.md"),
            encoding: .utf8
        )
        let compiled = try String(contentsOf: here, encoding: .utf8).split(separator: "\n").map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let blocks = Self.swiftBlocks(of: guide)
        #expect(blocks.count >= 5)
        for block in blocks {
            let lines = block.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            let found = compiled.indices.contains { start in
                start + lines.count <= compiled.count && Array(compiled[start..<start + lines.count]) == lines
            }
            #expect(
                found,
                "a block of LinuxServices.md is not compiled by GuideTests:\n\(block.joined(separator: "\n"))"
            )
        }
    }

    /// The lines of each ```swift block.
    static func swiftBlocks(of markdown: String) -> [[String]] {
        var blocks: [[String]] = []
        var current: [String]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if current == nil, line.hasPrefix("```swift") {
                current = []
            } else if current != nil, line.hasPrefix("```") {
                blocks.append(current ?? [])
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test func theGuidesLoopReportsWhenStoppedAndItsObserversSeeTheGroup() async throws {
        let loop = Loop(program: Guide.program, effects: Guide.router)
        let running = Task { try await Guide.reporting(loop) }
        while !loop.isRunning { await Task.yield() }
        loop.send(.work)
        loop.stop()
        try await running.value
        #expect(loop.state == 1)
        let group = Guide.observers(program: Guide.program, router: Guide.router, logger: Logger(label: "guide"))
        #expect(group.send(.work, to: "a") == .accepted)
        group.stop()
        #expect(Guide.metrics(program: Guide.program, router: Guide.router).contains("effectloop"))
    }
}
