// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "EffectLoop",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "LoopCore", targets: ["LoopCore"]),
        .library(name: "EffectHandlers", targets: ["EffectHandlers"]),
        .library(name: "EventSources", targets: ["EventSources"]),
        .library(name: "LoopRuntime", targets: ["LoopRuntime"]),
        .library(name: "LoopTesting", targets: ["LoopTesting"]),
        .library(name: "LoopJournal", targets: ["LoopJournal"]),
        .library(name: "LoopPersistence", targets: ["LoopPersistence"]),
        .library(name: "LoopPostgres", targets: ["LoopPostgres"]),
        .executable(name: "loop-bench", targets: ["loop-bench"]),
        .executable(name: "loop-demo", targets: ["loop-demo"]),
    ],
    targets: [
        .target(name: "LoopCore"),
        .target(name: "EffectHandlers", dependencies: ["LoopCore"]),
        .target(name: "EventSources", dependencies: ["LoopCore"]),
        .target(name: "LoopRuntime", dependencies: ["LoopCore", "EffectHandlers", "EventSources"]),
        .target(name: "LoopJournal", dependencies: ["LoopCore", "LoopRuntime"]),
        .target(name: "LoopPersistence", dependencies: ["LoopCore", "EffectHandlers", "EventSources", "LoopRuntime"]),
        // libpq, the PostgreSQL client library, found through pkg-config; only LoopPostgres links it.
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(
            name: "LoopPostgres",
            dependencies: ["CLibPQ", "LoopCore", "EffectHandlers", "LoopRuntime", "LoopPersistence"]
        ),
        .target(
            name: "LoopTesting",
            dependencies: [
                "LoopCore", "EffectHandlers", "LoopRuntime", "LoopPersistence",
                // ThrowawayPostgres starts its server through LoopSupport, which is Linux-only.
                .target(name: "LoopSupport", condition: .when(platforms: [.linux])),
            ]
        ),
        // Not a product: the plumbing the demo, the benchmark and the tests share (child processes, a
        // throwaway PostgreSQL server, the cluster's test programs). It links no test library.
        .target(name: "LoopSupport", dependencies: ["LoopCore", "EventSources", "LoopRuntime", "LoopPersistence"]),
        .target(
            name: "LoopDemo",
            dependencies: [
                "LoopCore", "EffectHandlers", "EventSources", "LoopRuntime", "LoopJournal", "LoopPersistence",
                "LoopSupport",
            ]
        ),
        .executableTarget(
            name: "loop-demo",
            dependencies: [
                "LoopCore", "EffectHandlers", "EventSources", "LoopRuntime", "LoopJournal", "LoopPersistence",
                "LoopDemo", "LoopPostgres", "LoopSupport",
            ]
        ),
        .executableTarget(name: "fuzz-commands", dependencies: ["LoopDemo"]),
        .executableTarget(name: "fuzz-journal", dependencies: ["LoopCore", "LoopJournal", "LoopDemo"]),
        .executableTarget(
            name: "loop-bench",
            dependencies: [
                "LoopCore", "EffectHandlers", "EventSources", "LoopRuntime", "LoopPersistence", "LoopPostgres",
                "LoopSupport",
            ]
        ),
        .testTarget(name: "LoopCoreTests", dependencies: ["LoopCore"]),
        // The guides' code, compiled and run as the guides show it (`.ci/guide-check.swift`): one target
        // per guide, so each declares its types at the top level as a reader's module would.
        .testTarget(
            name: "GettingStartedGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime", "LoopTesting"],
            path: "Tests/Guides/GettingStarted"
        ),
        .testTarget(
            name: "EffectsGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime"],
            path: "Tests/Guides/Effects"
        ),
        .testTarget(
            name: "RuntimeGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "EventSources", "LoopRuntime"],
            path: "Tests/Guides/Runtime"
        ),
        .testTarget(
            name: "JournalGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime", "LoopJournal"],
            path: "Tests/Guides/Journal"
        ),
        .testTarget(
            name: "CatalogGuideTests",
            dependencies: [
                "LoopCore", "EffectHandlers", "EventSources", "LoopRuntime", "LoopPersistence", "LoopPostgres",
            ],
            path: "Tests/Guides/Catalogs"
        ),
        .testTarget(
            name: "ReadmeGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime"],
            path: "Tests/Guides/Readme"
        ),
        .testTarget(
            name: "PersistenceGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopPersistence", "LoopSupport", "LoopTesting"],
            path: "Tests/Guides/Persistence"
        ),
        .testTarget(
            name: "ClusterGuideTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopPersistence", "LoopPostgres", "LoopSupport"],
            path: "Tests/Guides/Cluster"
        ),
        .testTarget(
            name: "LoopTestingTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime", "LoopTesting", "LoopSupport"]
        ),
        .testTarget(
            name: "LoopDemoTests",
            dependencies: [
                "LoopCore", "EffectHandlers", "LoopRuntime", "LoopDemo", "LoopPersistence", "LoopPostgres",
                "LoopSupport", "LoopTesting",
            ]
        ),
        .testTarget(
            name: "LoopJournalTests",
            dependencies: ["LoopCore", "EffectHandlers", "LoopRuntime", "LoopJournal"]
        ),
        .testTarget(
            name: "LoopPersistenceTests",
            dependencies: [
                "LoopCore", "EffectHandlers", "EventSources", "LoopPersistence", "LoopRuntime", "LoopSupport",
                "LoopTesting",
            ]
        ),
        .testTarget(
            name: "LoopRuntimeTests",
            dependencies: ["LoopCore", "EffectHandlers", "EventSources", "LoopRuntime", "LoopTesting"]
        ),
        .testTarget(
            name: "LoopPostgresTests",
            dependencies: [
                "LoopCore", "LoopPersistence", "LoopPostgres", "LoopRuntime", "LoopSupport", "LoopTesting",
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system {
    target.swiftSettings =
        (target.swiftSettings ?? []) + [
            .enableUpcomingFeature("ExistentialAny"),
            .enableUpcomingFeature("InternalImportsByDefault"),
            .enableUpcomingFeature("MemberImportVisibility"),
        ]
}
