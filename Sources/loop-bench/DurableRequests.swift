import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopSupport

// w13 and w15: requests to durable entities, each answered only once its event is on disk.

/// An account that answers each deposit with its balance; `growing` ones also keep every amount, so
/// their state grows by one entry per event (w15's hot entity).
///
/// Events, states and answers are stored packed (``PackedCodec``), as a service's hot path would be.
enum Deposits {
    enum Event: Codable, Packable, Sendable {
        case deposit(Int, replyTo: ReplyTo<Int>)

        func pack(into packer: inout Packer) {
            switch self {
            case .deposit(let amount, let replyTo):
                packer.pack(case: 0)
                packer.pack(amount)
                packer.pack(replyTo)
            }
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            switch try unpacker.unpackCase() {
            case 0: self = .deposit(try unpacker.unpack(), replyTo: try unpacker.unpack())
            case let other: throw unpacker.unknownCase(other, of: Event.self)
            }
        }
    }

    struct State: Codable, Packable, Sendable {
        var balance = 0
        var entries: [Int] = []

        init() {}

        func pack(into packer: inout Packer) {
            packer.pack(balance)
            packer.pack(entries)
        }

        init(unpacking unpacker: inout Unpacker) throws(CodecError) {
            balance = try unpacker.unpack()
            entries = try unpacker.unpack()
        }
    }

    enum Effect: Sendable {
        case answer(Reply<Int>)
    }

    static func program(growing: Bool) -> DurableProgram<State, Event, Effect> {
        DurableProgram(
            initial: State(),
            update: Update { state, event in
                switch event {
                case .deposit(let amount, let replyTo):
                    state.balance += amount
                    if growing { state.entries.append(amount) }
                    return [.answer(replyTo.reply(state.balance))]
                }
            }
        )
        .replying({ if case .answer(let reply) = $0 { reply } else { nil } }, codec: PackedCodec<Int>())
    }

    typealias Group = DurableLoopGroup<Int, State, Event, Effect>

    /// `requesters` tasks each send `each` deposits of 1, one after another, spread over `entities`
    /// (keyed with a key of their own when `keyed`): the seconds it took, every request's latency in
    /// milliseconds, and whether every answer was a balance.
    static func run(
        _ group: Group,
        requesters: Int,
        each: Int,
        entities: Int,
        keyed: Bool
    ) async throws -> (seconds: Double, latencies: [Double], ok: Bool) {
        var latencies: [Double] = []
        var ok = true
        let seconds = try await Measure.seconds {
            try await withThrowingTaskGroup(of: ([Double], Bool).self) { tasks in
                for requester in 0..<requesters {
                    tasks.addTask {
                        var mine: [Double] = []
                        mine.reserveCapacity(each)
                        var answered = true
                        for index in 0..<each {
                            let entity = (requester * each + index) % entities
                            let start = ContinuousClock.now
                            let balance = try await group.request(
                                to: entity,
                                key: keyed ? "r\(requester)-\(index)" : nil,
                                timeout: .seconds(60)
                            ) { .deposit(1, replyTo: $0) }
                            mine.append(milliseconds(ContinuousClock.now - start))
                            answered = answered && balance > 0
                        }
                        return (mine, answered)
                    }
                }
                for try await (mine, answered) in tasks {
                    latencies += mine
                    ok = ok && answered
                }
            }
        }
        return (seconds, latencies.sorted(), ok)
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15
    }

    /// The `fraction` percentile of sorted `values`.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        values.isEmpty ? 0 : values[min(values.count - 1, Int(Double(values.count - 1) * fraction))]
    }
}

extension Workloads {
    /// w13: 64 requesters send keyed requests to 10,000 durable entities on the file store; each reply
    /// comes once its event is fdatasync'd. Replies/s with p50/p99 latency. Raw: the same bytes written
    /// in the same batches, one fdatasync per batch (as w7).
    static func w13(_ sizes: Sizes) async throws -> Outcome {
        let (entities, requesters, each) = (10_000, 64, sizes.w13Requests)
        let total = requesters * each
        var rates: [Double] = []
        var raws: [Double] = []
        var p50s: [Double] = []
        var p99s: [Double] = []
        var perSync: [Double] = []
        var processor: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let directory = scratchStore("w13")
            defer { removeTree(directory) }
            let store = try FileEventStore(directory: directory)
            let group = Deposits.Group(
                program: Deposits.program(growing: false),
                effects: EffectRouter(),
                store: store,
                events: PackedCodec<Deposits.Event>(),
                states: PackedCodec<Deposits.State>(),
                snapshotEvery: nil
            )
            let running = Task { try await group.run() }
            _ = await group.waitUntilRunning()
            let used = Measure.processorSeconds()
            let run = try await Deposits.run(group, requesters: requesters, each: each, entities: entities, keyed: true)
            processor.append((Measure.processorSeconds() - used) * 1e6 / Double(total))
            let balances = (0..<entities).reduce(0) { $0 + (group.state(of: $1)?.balance ?? 0) }
            group.stop()
            _ = try await running.value
            let statistics = store.statistics
            await store.close()
            ok = ok && run.ok && balances == total && statistics.events == UInt64(total)
            rates.append(Double(total) / run.seconds)
            p50s.append(Deposits.percentile(run.latencies, 0.5))
            p99s.append(Deposits.percentile(run.latencies, 0.99))
            perSync.append(Double(statistics.events) / Double(max(1, statistics.syncs)))
            raws.append(try rawAppends(bytes: statistics.bytes, syncs: statistics.syncs, events: total))
        }
        return Outcome(
            workload: "w13",
            title:
                "keyed requests to \(entities) durable entities from \(requesters) requesters, answered once on disk",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            extra: [
                ("p50_ms", Measure.median(p50s)), ("p99_ms", Measure.median(p99s)),
                ("p99_ms_max", p99s.max() ?? 0), ("events_per_sync", Measure.median(perSync)),
                ("cpu_us_per_request", Measure.median(processor)),
            ],
            rates: rates
        )
    }

    /// w15: 64 requesters send requests to one entity whose state grows by one entry per event, with a
    /// snapshot every 1,000 events, and again without snapshots, in the same run: the p99 latency of each.
    static func w15(_ sizes: Sizes) async throws -> Outcome {
        let (requesters, each) = (64, sizes.w15Requests)
        let total = requesters * each
        var rates: [Double] = []
        var with: [Double] = []
        var without: [Double] = []
        var p50s: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            for snapshots in [false, true] {
                let directory = scratchStore("w15")
                defer { removeTree(directory) }
                let store = try FileEventStore(directory: directory)
                let group = Deposits.Group(
                    program: Deposits.program(growing: true),
                    effects: EffectRouter(),
                    store: store,
                    events: PackedCodec<Deposits.Event>(),
                    states: PackedCodec<Deposits.State>(),
                    snapshotEvery: snapshots ? 1_000 : nil
                )
                let running = Task { try await group.run() }
                _ = await group.waitUntilRunning()
                let run = try await Deposits.run(group, requesters: requesters, each: each, entities: 1, keyed: false)
                let state = try await group.durableState(of: 0)
                group.stop()
                _ = try await running.value
                let saved = try await store.latestSnapshot(of: "0")
                await store.close()
                ok = ok && run.ok && state.balance == total && state.entries.count == total
                ok = ok && (snapshots ? (saved?.version ?? 0) >= UInt64(total - 2_000) : saved == nil)
                if snapshots {
                    rates.append(Double(total) / run.seconds)
                    with.append(Deposits.percentile(run.latencies, 0.99))
                    p50s.append(Deposits.percentile(run.latencies, 0.5))
                } else {
                    without.append(Deposits.percentile(run.latencies, 0.99))
                }
            }
        }
        return Outcome(
            workload: "w15",
            title: "\(requesters) requesters to one entity growing by an entry per event, snapshots every 1,000",
            perSecond: Measure.median(rates),
            rawPerSecond: 0,
            runs: sizes.runs,
            ok: ok,
            extra: [
                ("p50_ms", Measure.median(p50s)), ("p99_ms", Measure.median(with)),
                ("p99_ms_without_snapshots", Measure.median(without)),
            ],
            rates: rates
        )
    }
}
