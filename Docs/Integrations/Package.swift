// swift-tools-version: 6.2
import PackageDescription

// Adapters from EffectLoop to the server-side Swift stack, kept apart from the library so that the
// library's own manifest never declares a package dependency: only those who build this package
// fetch these. `make integrations` (at the repository's root) builds and tests it.
let package = Package(
    name: "EffectLoopIntegrations",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "LoopServiceLifecycle", targets: ["LoopServiceLifecycle"]),
        .library(name: "LoopLogging", targets: ["LoopLogging"]),
        .library(name: "LoopMetrics", targets: ["LoopMetrics"]),
        .library(name: "LoopTracing", targets: ["LoopTracing"]),
        .executable(name: "accounts-service", targets: ["accounts-service"]),
    ],
    dependencies: [
        .package(name: "EffectLoop", path: "../.."),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.1.0"),
        // The example service. No traits: Hummingbird's configuration support is not needed here.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.0.0"),
    ],
    targets: [
        // The example service: accounts as durable entities behind an HTTP JSON API (see its README).
        .target(
            name: "AccountsService",
            dependencies: [
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "LoopPostgres", package: "EffectLoop"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .executableTarget(
            name: "accounts-service",
            dependencies: [
                "AccountsService", "LoopServiceLifecycle", "LoopLogging", "LoopMetrics",
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "LoopPostgres", package: "EffectLoop"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "AccountsServiceTests",
            dependencies: [
                "AccountsService", "accounts-service",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "LoopTesting", package: "EffectLoop"),
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
            ]
        ),
        .target(
            name: "LoopServiceLifecycle",
            dependencies: [
                "LoopLogging",
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "LoopLogging",
            dependencies: [
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "LoopMetrics",
            dependencies: [
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "LoopServiceLifecycleTests",
            dependencies: [
                .product(name: "EventSources", package: "EffectLoop"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                "LoopServiceLifecycle",
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        .target(
            name: "LoopTracing",
            dependencies: [
                .product(name: "EffectHandlers", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ]
        ),
        .testTarget(
            name: "LoopTracingTests",
            dependencies: [
                "LoopTracing",
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        // The code of Docs/LinuxServices.md, compiled and run as the guide shows it (the root's
        // `.ci/guide-check.swift` compares the two).
        .testTarget(
            name: "LinuxServicesGuideTests",
            dependencies: [
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                "LoopServiceLifecycle", "LoopLogging", "LoopMetrics", "LoopTracing",
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                .product(name: "EventSources", package: "EffectLoop"),
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "LoopPersistence", package: "EffectLoop"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            path: "Tests/Guides/LinuxServices"
        ),
        .testTarget(
            name: "LoopLoggingTests",
            dependencies: [
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                "LoopLogging",
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "LoopMetricsTests",
            dependencies: [
                .product(name: "LoopCore", package: "EffectLoop"),
                .product(name: "EffectHandlers", package: "EffectLoop"),
                "LoopMetrics",
                .product(name: "LoopRuntime", package: "EffectLoop"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The same strictness as the library's: Swift 6 mode, every warning an error (through the Makefile's
// flags), Sendable designed in.
for target in package.targets {
    target.swiftSettings =
        (target.swiftSettings ?? []) + [
            .enableUpcomingFeature("ExistentialAny"),
            .enableUpcomingFeature("InternalImportsByDefault"),
            .enableUpcomingFeature("MemberImportVisibility"),
        ]
}
