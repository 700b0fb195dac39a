import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The durable workloads' program: an entity adds up what it is sent; each event has one effect,
/// which the benchmark counts, so "performed" means "durable, then its effect ran".
///
/// Its events and states are stored in their packed form (``PackedCodec``), as a service's hot events
/// would be; w8 also measures recovery with the `Codable` form (``BinaryCodec``), side by side.
enum Tally {
    enum Event: Codable, Packable, Sendable, Equatable {
        case add(Int)

        func pack(into packer: inout Packer) {
            switch self {
            case .add(let amount):
                packer.pack(case: 0)
                packer.pack(amount)
            }
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            switch try unpacker.unpackCase() {
            case 0: self = .add(try unpacker.unpack())
            case let other: throw unpacker.unknownCase(other, of: Event.self)
            }
        }
    }

    enum Effect: Sendable {
        case done
    }

    static let program = DurableProgram<Int, Event, Effect>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount): total += amount
            }
            return [.done]
        }
    )

    /// A group of Tally entities on `store`, without snapshots, its effects counted by `counter`; its
    /// events packed, or in the `Codable` form when `codable`.
    static func group(
        on store: any EventStore,
        counter: Counter,
        codable: Bool = false,
        passivation: DurableLoopGroup<Int, Int, Event, Effect>.Passivation = .never
    ) -> DurableLoopGroup<Int, Int, Event, Effect> {
        codable
            ? DurableLoopGroup(
                program: program,
                effects: counter.router,
                store: store,
                snapshotEvery: nil,
                passivation: passivation
            )
            : DurableLoopGroup(
                program: program,
                effects: counter.router,
                store: store,
                events: PackedCodec<Event>(),
                states: PackedCodec<Int>(),
                snapshotEvery: nil,
                passivation: passivation
            )
    }

    /// Sends `events` `.add(1)` round-robin to `entities` entities on `store`, each durable before its
    /// effect runs: the seconds until every effect ran, and the entities' totals added up.
    static func run(on store: any EventStore, entities: Int, events: Int) async throws -> (seconds: Double, total: Int)
    {
        let counter = Counter()
        let group = group(on: store, counter: counter)
        let running = Task { try await group.run() }
        _ = await group.waitUntilRunning()
        let seconds = await Measure.seconds {
            for index in 0..<events { group.send(.add(1), to: index % entities) }
            await counter.wait(for: events)
        }
        group.stop()
        _ = try await running.value
        return (seconds, (0..<entities).reduce(0) { $0 + (group.state(of: $1) ?? 0) })
    }

    /// Counts effects performed, and wakes a waiter once `target` are.
    final class Counter: Sendable {
        let performed = Atomic<Int>(0)

        var router: EffectRouter<Effect, Event> {
            EffectRouter<Effect, Event>()
                .route({ $0 }, to: ClosureSyncEffectHandler { _, _ in self.performed.add(1, ordering: .relaxed) })
        }

        /// Waits (yielding) until `target` effects are performed.
        func wait(for target: Int) async {
            while performed.load(ordering: .relaxed) < target { try? await Task.sleep(for: .microseconds(200)) }
        }
    }
}

/// A scratch directory on the disk the benchmark runs from (not a tmpfs, where `fdatasync` is free).
func scratchStore(_ name: String) -> String {
    let path = ".build/bench-\(name)-\(getpid())"
    removeTree(path)
    mkdir(path, 0o755)
    return path
}

/// Appends `each` to `streams` new streams of `store` (named by `name`), 64 appends at a time.
func fill(
    _ store: FileEventStore,
    streams: Int,
    each: [[UInt8]],
    name: @escaping @Sendable (Int) -> String
) async throws {
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        for worker in 0..<64 {
            tasks.addTask {
                for stream in stride(from: worker, to: streams, by: 64) {
                    _ = try await store.append(each, to: name(stream), expecting: 0)
                }
            }
        }
        try await tasks.waitForAll()
    }
}

extension Workloads {
    /// w7: events sent to 10,000 durable entities on the file store, each durable (fdatasync'd) before
    /// its effect runs. Raw: the same bytes written in the same batches, one fdatasync per batch.
    static func w7(_ sizes: Sizes) async throws -> Outcome {
        let entities = 10_000
        var rates: [Double] = []
        var raws: [Double] = []
        var ok = true
        var batch = 0.0
        for _ in 0..<sizes.runs {
            let directory = scratchStore("w7")
            defer { removeTree(directory) }
            let store = try FileEventStore(directory: directory)
            let events = sizes.w7Events
            let (seconds, total) = try await Tally.run(on: store, entities: entities, events: events)
            let statistics = store.statistics
            await store.close()
            ok = ok && total == events && statistics.events == UInt64(events)
            rates.append(Double(events) / seconds)
            batch = Double(statistics.bytes) / Double(max(1, statistics.syncs))
            raws.append(try rawAppends(bytes: statistics.bytes, syncs: statistics.syncs, events: events))
        }
        return Outcome(
            workload: "w7",
            title: "durable events/s, \(entities) entities on the file store (each fdatasync'd before its effect)",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            extra: [("bytes_per_sync", batch)],
            rates: rates
        )
    }

    /// The raw baseline of w7: `bytes` written in `syncs` equal writes, each followed by `fdatasync`,
    /// into a file zero-filled ahead, as the file store writes (its batches overwrite zeros, so their
    /// syncs write no file size).
    static func rawAppends(bytes: Int, syncs: Int, events: Int) throws -> Double {
        let directory = scratchStore("w7raw")
        defer { removeTree(directory) }
        let descriptor = open(directory + "/log", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        defer { close(descriptor) }
        let zeros = [UInt8](repeating: 0, count: bytes + 4_096)
        _ = zeros.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        fdatasync(descriptor)
        let chunk = [UInt8](repeating: 7, count: max(1, bytes / max(1, syncs)))
        let start = ContinuousClock.now
        for index in 0..<max(1, syncs) {
            _ = chunk.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(index * $0.count)) }
            fdatasync(descriptor)
        }
        let elapsed = ContinuousClock.now - start
        return Double(events) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// w8: entities with 10 events each on disk, every one recovered (the store opened, its snapshot-less
    /// streams read back and folded through the update), with the events packed (the figure) and in the
    /// `Codable` form (`codable_per_sec`), in turn. Raw: decoding and folding the same events in a plain
    /// loop (`raw_per_sec` packed, `codable_raw_per_sec` `Codable`).
    static func w8(_ sizes: Sizes) async throws -> Outcome {
        let entities = sizes.w8Entities
        let perEntity = 10
        let packed = PackedCodec<Tally.Event>()
        let codable = BinaryCodec<Tally.Event>()
        let directories = [scratchStore("w8"), scratchStore("w8codable")]
        defer { directories.forEach(removeTree) }
        for (directory, payload) in zip(directories, [packed.encode(.add(1)), try codable.encode(.add(1))]) {
            let store = try FileEventStore(directory: directory)
            try await fill(store, streams: entities, each: Array(repeating: payload, count: perEntity)) { "\($0)" }
            await store.close()
        }
        var rates: [[Double]] = [[], []]
        var ok = true
        for _ in 0..<sizes.runs {
            for (index, directory) in directories.enumerated() {
                let (rate, recovered) = try await recover(
                    directory,
                    entities: entities,
                    each: perEntity,
                    codable: index == 1
                )
                ok = ok && recovered
                rates[index].append(rate)
            }
        }
        let events = entities * perEntity
        func raw(_ decode: ([UInt8]) throws -> Tally.Event, _ payload: [UInt8]) throws -> Double {
            var totals = [Int](repeating: 0, count: entities)
            let start = ContinuousClock.now
            for index in 0..<events {
                if case .add(let amount) = try decode(payload) { totals[index % entities] += amount }
            }
            let elapsed = ContinuousClock.now - start
            ok = ok && totals.allSatisfy { $0 == perEntity }
            return Double(events) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
        let rawPacked = try raw(packed.decode, packed.encode(.add(1)))
        let rawCodable = try raw(codable.decode, try codable.encode(.add(1)))
        return Outcome(
            workload: "w8",
            title: "events/s recovered: \(entities) entities x \(perEntity) events, store opened and each recovered",
            perSecond: Measure.median(rates[0]),
            rawPerSecond: rawPacked,
            runs: sizes.runs,
            ok: ok,
            extra: [("codable_per_sec", Measure.median(rates[1])), ("codable_raw_per_sec", rawCodable)],
            rates: rates[0]
        )
    }

    /// Opens the store in `directory` and recovers its `entities` entities (each `each` events long): the
    /// events recovered a second, and whether every entity came back whole.
    static func recover(_ directory: String, entities: Int, each: Int, codable: Bool) async throws -> (Double, Bool) {
        let counter = Tally.Counter()
        let start = ContinuousClock.now
        let store = try FileEventStore(directory: directory)
        let group = Tally.group(on: store, counter: counter, codable: codable)
        let running = Task { try await group.run() }
        for entity in 0..<entities { group.wake(entity) }
        while group.recoveries < entities { try? await Task.sleep(for: .microseconds(500)) }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let recovered = (0..<entities).count { group.state(of: $0) == each }
        group.stop()
        _ = try await running.value
        await store.close()
        return (Double(entities * each) / seconds, recovered == entities)
    }

    /// w9: entities each sent one event, with at most 10,000 live (the rest passivated); the peak
    /// resident memory growth of the process.
    static func w9(_ sizes: Sizes) async throws -> Outcome {
        let entities = sizes.w9Entities
        let directory = scratchStore("w9")
        defer { removeTree(directory) }
        Measure.trimHeap()
        let before = Measure.status("VmRSS")
        Measure.resetPeak()
        let store = try FileEventStore(directory: directory)
        let counter = Tally.Counter()
        let group = Tally.group(on: store, counter: counter, passivation: .init(maximumLive: 10_000))
        let running = Task { try await group.run() }
        var maximumLive = 0
        let seconds = await Measure.seconds {
            // In waves of 5,000, so the oldest entities are quiet (recorded) by the time the cap asks.
            for start in stride(from: 0, to: entities, by: 5_000) {
                for entity in start..<min(start + 5_000, entities) { group.send(.add(1), to: entity) }
                await counter.wait(for: min(start + 5_000, entities))
                maximumLive = max(maximumLive, group.count)
            }
        }
        let peak = Measure.status("VmHWM")
        group.stop()
        _ = try await running.value
        let statistics = store.statistics
        await store.close()
        let growth = max(0, peak - before)
        let processed = counter.performed.load(ordering: .relaxed)
        return Outcome(
            workload: "w9",
            title: "\(entities) entities, one event each, at most 10,000 live; peak RSS growth",
            perSecond: Double(entities) / seconds,
            rawPerSecond: 0,
            runs: 1,
            ok: processed == entities && statistics.events == UInt64(entities),
            extra: [
                ("peak_rss_growth_bytes", Double(growth)), ("max_live", Double(maximumLive)),
                ("passivated", Double(group.passivations)),
            ]
        )
    }
}
