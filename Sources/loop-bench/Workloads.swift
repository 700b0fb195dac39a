import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime

/// What one workload measured: EffectLoop's rate, the raw baseline's rate, and its own figures.
struct Outcome {
    var workload: String
    var title: String
    var perSecond: Double
    var rawPerSecond: Double
    var runs: Int
    var ok: Bool
    var extra: [(key: String, value: Double)] = []
    /// The rate of each run, for the minimum and maximum reported beside the median.
    var rates: [Double] = []
}

/// Sizes of the workloads: full, or small for a smoke test.
struct Sizes {
    var runs: Int
    var w1Events: Int
    var w2RoundTrips: Int
    var w3Loops: Int
    var w4Events: Int
    var w4Small: Int
    var w4Large: Int
    var w5Events: Int
    var w6Loops: Int
    var w7Events: Int
    var w8Entities: Int
    var w9Entities: Int
    var w10Events: Int
    var w11Kills: Int
    var w11History: Int
    var w12Callers: Int
    var w12Requests: Int
    var w13Requests: Int
    var w14Requests: Int
    var w15Requests: Int
    var w16Events: Int
    var w16Streams: Int
    var w17Events: Int
    var w17ShrinkStreams: Int

    static let full = Sizes(
        runs: 5,
        w1Events: 1_000_000,
        w2RoundTrips: 100_000,
        w3Loops: 10_000,
        w4Events: 100_000,
        w4Small: 10_000,
        w4Large: 100_000,
        w5Events: 1_000_000,
        w6Loops: 100_000,
        w7Events: 200_000,
        w8Entities: 100_000,
        w9Entities: 1_000_000,
        w10Events: 100_000,
        w11Kills: 5,
        w11History: 100_000,
        w12Callers: 1_000,
        w12Requests: 100,
        w13Requests: 3_000,
        w14Requests: 500,
        w15Requests: 500,
        w16Events: 10_000_000,
        w16Streams: 100_000,
        w17Events: 1_000_000,
        w17ShrinkStreams: 100_000
    )
    static let quick = Sizes(
        runs: 3,
        w1Events: 100_000,
        w2RoundTrips: 10_000,
        w3Loops: 1_000,
        w4Events: 10_000,
        w4Small: 1_000,
        w4Large: 10_000,
        w5Events: 100_000,
        w6Loops: 10_000,
        w7Events: 20_000,
        w8Entities: 5_000,
        w9Entities: 20_000,
        w10Events: 5_000,
        w11Kills: 1,
        w11History: 2_000,
        w12Callers: 100,
        w12Requests: 20,
        w13Requests: 100,
        w14Requests: 30,
        w15Requests: 50,
        w16Events: 200_000,
        w16Streams: 2_000,
        w17Events: 100_000,
        w17ShrinkStreams: 2_000
    )
}

// MARK: Programs

enum Count: Sendable {
    case increment
    case add(Int)
}

let counting = Update<Int, Count, Never> { total, event in
    switch event {
    case .increment: total += 1
    case .add(let amount): total += amount
    }
    return []
}

func countingEvents(_ count: Int) -> (events: [Count], total: Int) {
    let events = (0..<count).map { $0.isMultiple(of: 2) ? Count.increment : .add(2) }
    return (events, count / 2 + (count - count / 2) * 2)
}

enum PingEvent: Sendable {
    case ping(Int)
    case ack(Int)
}

enum PingEffect: Sendable {
    case pong(Int)
    case done
}

struct PingState: Sendable {
    var acks = 0
    var target: Int
}

let pinging = Update<PingState, PingEvent, PingEffect> { state, event in
    switch event {
    case .ping(let index):
        return [.pong(index)]
    case .ack:
        state.acks += 1
        return state.acks == state.target ? [.done] : []
    }
}

/// Runs `loop` for the duration of `body`, then stops it.
func whileRunning<State, Event, Effect, Result: Sendable>(
    _ loop: Loop<State, Event, Effect>,
    _ body: () async throws -> Result
) async throws -> Result {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await loop.run() }
        while !loop.isRunning { await Task.yield() }
        let result = try await body()
        loop.stop()
        try await group.waitForAll()
        return result
    }
}

// MARK: Workloads

enum Workloads {
    /// w1: one sender, trivial events, no effects.
    static func w1(_ sizes: Sizes) async throws -> Outcome {
        let (events, total) = countingEvents(sizes.w1Events)
        var rates: [Double] = []
        var raws: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let loop = Loop(program: Program(first: First(state: 0), update: counting), effects: EffectRouter())
            let seconds = try await whileRunning(loop) {
                await Measure.seconds { for event in events { loop.send(event) } }
            }
            ok = ok && loop.state == total
            rates.append(Double(events.count) / seconds)
            var raw = 0
            let rawSeconds = await Measure.seconds { for event in events { _ = counting(&raw, event) } }
            ok = ok && raw == total
            raws.append(Double(events.count) / rawSeconds)
        }
        return Outcome(
            workload: "w1",
            title: "one sender, \(events.count) trivial events",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            rates: rates
        )
    }

    /// w2 / w2s: event -> effect -> handler -> event round trips.
    static func w2(_ sizes: Sizes, synchronous: Bool) async throws -> Outcome {
        let count = sizes.w2RoundTrips
        var rates: [Double] = []
        var raws: [Double] = []
        var locks: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let (done, finished) = AsyncStream<Void>.makeStream()
            let pong: @Sendable (PingEffect) -> Int? = { if case .pong(let index) = $0 { index } else { nil } }
            let doneRoute: @Sendable (PingEffect) -> Void? = { if case .done = $0 { () } else { nil } }
            var router = EffectRouter<PingEffect, PingEvent>()
                .route(doneRoute, to: ClosureSyncEffectHandler { _, _ in finished.finish() })
            router =
                synchronous
                ? router.route(pong, to: ClosureSyncEffectHandler { index, send in send(.ack(index)) })
                : router.route(pong, to: ClosureEffectHandler { index, send in send(.ack(index)) })
            let loop = Loop(
                program: Program(first: First(state: PingState(target: count)), update: pinging),
                effects: router
            )
            let locksBefore = Measure.lockAcquisitions
            let seconds = try await whileRunning(loop) {
                await Measure.seconds {
                    // Sent from a thread of its own, as a service's network threads would.
                    let sender = OSThread { for index in 0..<count { loop.send(.ping(index)) } }
                    for await _ in done {}
                    sender.join()
                }
            }
            ok = ok && loop.state.acks == count
            locks.append(Double(Measure.lockAcquisitions - locksBefore) / Double(count))
            rates.append(Double(count) / seconds)
            raws.append(await rawRoundTrips(count, synchronous: synchronous))
        }
        var outcome = Outcome(
            workload: synchronous ? "w2s" : "w2",
            title: "\(count) round trips, \(synchronous ? "synchronous" : "async") handler",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            rates: rates
        )
        if Measure.countsLocks { outcome.extra.append(("locks_per_round_trip", Measure.median(locks))) }
        return outcome
    }

    /// The same round trips with the update and the handler called directly.
    private static func rawRoundTrips(_ count: Int, synchronous: Bool) async -> Double {
        let pending = Locked([PingEvent]())
        let send = Send<PingEvent> { event in
            pending.withLock { $0.append(event) }
            return .accepted
        }
        let asyncHandler = ClosureEffectHandler<Int, PingEvent> { index, send in send(.ack(index)) }
        let syncHandler = ClosureSyncEffectHandler<Int, PingEvent> { index, send in send(.ack(index)) }
        var state = PingState(target: count)
        return Double(count)
            / (await Measure.seconds {
                for index in 0..<count {
                    for effect in pinging(&state, .ping(index)) {
                        guard case .pong(let value) = effect else { continue }
                        if synchronous {
                            try? syncHandler.handle(value, send: send)
                        } else {
                            try? await asyncHandler.handle(value, send: send)
                        }
                    }
                    for event in pending.withLock({ events in
                        defer { events = [] }
                        return events
                    }) {
                        _ = pinging(&state, event)
                    }
                }
            })
    }

    /// w3: many idle loops held in a LoopGroup, ten events each.
    static func w3(_ sizes: Sizes) async throws -> Outcome {
        let loops = sizes.w3Loops
        var rates: [Double] = []
        var raws: [Double] = []
        var bytes: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let group = LoopGroup<Int, Int, Count, Never>(
                program: { _ in Program(first: First(state: 0), update: counting) },
                effects: EffectRouter()
            )
            Measure.trimHeap()
            let before = Measure.status("VmRSS")
            let seconds = try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                while !group.isRunning { await Task.yield() }
                let seconds = await Measure.seconds {
                    for round in 0..<10 {
                        for id in 0..<loops { group.send(round.isMultiple(of: 2) ? .increment : .add(2), to: id) }
                    }
                }
                let after = Measure.status("VmRSS")
                bytes.append(Double(max(0, after - before)) / Double(loops))
                group.stop()
                try await tasks.waitForAll()
                // Checked once stopped: `send` never waits, so an event may still be queued before.
                ok = ok && group.count == loops && (0..<loops).allSatisfy { group.state(of: $0) == 15 }
                return seconds
            }
            rates.append(Double(loops * 10) / seconds)
            var totals = [Int](repeating: 0, count: loops)
            let rawSeconds = await Measure.seconds {
                for round in 0..<10 {
                    for id in 0..<loops { _ = counting(&totals[id], round.isMultiple(of: 2) ? .increment : .add(2)) }
                }
            }
            ok = ok && totals.allSatisfy { $0 == 15 }
            raws.append(Double(loops * 10) / rawSeconds)
        }
        return Outcome(
            workload: "w3",
            title: "\(loops) loops in a LoopGroup x 10 events",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            // The first run's: the benchmark starts this workload in a fresh process, and later runs
            // reuse the pages the first one freed.
            extra: [("bytes_per_loop", bytes.first ?? 0), ("vm_hwm_bytes", Double(Measure.status("VmHWM")))],
            rates: rates
        )
    }

    /// w3s: standalone loops, each started (`start()`, no task of its own), 10 events each; resident bytes
    /// per loop while they all run, measured in the first run (the benchmark starts this workload in a
    /// fresh process, so no freed page hides what the loops take). Also measured once, after the runs: the
    /// same loops each running in a task of their own that awaits `run()`, as a service with one loop per
    /// connection task would.
    static func w3s(_ sizes: Sizes) async throws -> Outcome {
        let count = sizes.w3Loops
        func makeLoops() -> [Loop<Int, Count, Never>] {
            (0..<count).map { _ in
                Loop(program: Program(first: First(state: 0), update: counting), effects: EffectRouter<Never, Count>())
            }
        }
        func sendTen(_ loops: [Loop<Int, Count, Never>]) async -> Double {
            await Measure.seconds {
                for round in 0..<10 {
                    for loop in loops { loop.send(round.isMultiple(of: 2) ? .increment : .add(2)) }
                }
            }
        }
        var rates: [Double] = []
        var firstBytes: Double?
        var createdBytes: Double?
        var ok = true
        for _ in 0..<sizes.runs {
            Measure.trimHeap()
            let before = Measure.status("VmRSS")
            let loops = makeLoops()
            if createdBytes == nil { createdBytes = Double(max(0, Measure.status("VmRSS") - before)) / Double(count) }
            for loop in loops { try loop.start() }
            let seconds = await sendTen(loops)
            if firstBytes == nil {
                firstBytes = Double(max(0, Measure.status("VmRSS") - before)) / Double(count)
            }
            for loop in loops { loop.stop() }
            for loop in loops { ok = await loop.waitUntilStopped().ending == .drained && ok }
            ok = ok && loops.allSatisfy { $0.state == 15 }
            rates.append(Double(count * 10) / seconds)
        }
        // The same, each loop in a task awaiting `run()`: the task is most of what such a loop costs. After
        // the runs above, so this figure may reuse pages they freed: it is a lower bound.
        Measure.trimHeap()
        let before = Measure.status("VmRSS")
        let loops = makeLoops()
        let taskBytes = try await withThrowingTaskGroup(of: Void.self) { tasks in
            for loop in loops { tasks.addTask { try await loop.run() } }
            for loop in loops { _ = await loop.waitUntilRunning() }
            _ = await sendTen(loops)
            let bytes = Double(max(0, Measure.status("VmRSS") - before)) / Double(count)
            for loop in loops { loop.stop() }
            try await tasks.waitForAll()
            return bytes
        }
        ok = ok && loops.allSatisfy { $0.state == 15 }
        return Outcome(
            workload: "w3s",
            title: "\(count) standalone loops, each running, x 10 events",
            perSecond: Measure.median(rates),
            rawPerSecond: 0,
            runs: sizes.runs,
            ok: ok,
            // What a started loop costs while it runs, before it runs (the object alone), and in a task of
            // its own that awaits `run()`.
            extra: [
                ("bytes_per_loop", firstBytes ?? 0), ("bytes_per_loop_not_running", createdBytes ?? 0),
                ("bytes_per_loop_run_task", taskBytes),
            ],
            rates: rates
        )
    }

    /// w4: per-event cost with a large state, at two sizes.
    static func w4(_ sizes: Sizes) async throws -> Outcome {
        let appending = Update<[Int], Int, Never> { items, value in
            items.append(value)
            return []
        }
        func perEvent(prefilled: Int) async throws -> (loop: Double, raw: Double, ok: Bool) {
            var items = [Int](0..<prefilled)
            items.reserveCapacity(prefilled + sizes.w4Events)
            let loop = Loop(
                program: Program(first: First(state: consume items), update: appending),
                effects: EffectRouter()
            )
            let seconds = try await whileRunning(loop) {
                await Measure.seconds { for value in 0..<sizes.w4Events { loop.send(value) } }
            }
            let ok = loop.state.count == prefilled + sizes.w4Events
            var raw = [Int](0..<prefilled)
            raw.reserveCapacity(prefilled + sizes.w4Events)
            let rawSeconds = await Measure.seconds { for value in 0..<sizes.w4Events { _ = appending(&raw, value) } }
            return (
                seconds / Double(sizes.w4Events), rawSeconds / Double(sizes.w4Events),
                ok && raw.count == loop.state.count
            )
        }
        var small: [Double] = []
        var large: [Double] = []
        var rawSmall: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let first = try await perEvent(prefilled: sizes.w4Small)
            let second = try await perEvent(prefilled: sizes.w4Large)
            small.append(first.loop)
            large.append(second.loop)
            rawSmall.append(first.raw)
            ok = ok && first.ok && second.ok
        }
        let smallCost = Measure.median(small)
        let largeCost = Measure.median(large)
        return Outcome(
            workload: "w4",
            title: "state array at \(sizes.w4Small) vs \(sizes.w4Large) elements",
            perSecond: 1 / largeCost,
            rawPerSecond: 1 / Measure.median(rawSmall),
            runs: sizes.runs,
            ok: ok,
            extra: [
                ("ns_per_event_small", smallCost * 1e9), ("ns_per_event_large", largeCost * 1e9),
                ("cost_ratio", largeCost / smallCost),
            ]
        )
    }

    /// w5: two senders on two threads.
    static func w5(_ sizes: Sizes) async throws -> Outcome {
        let half = sizes.w5Events / 2
        let (events, total) = countingEvents(half)
        var rates: [Double] = []
        var raws: [Double] = []
        var lost = 0
        var correct = true
        for _ in 0..<sizes.runs {
            let loop = Loop(program: Program(first: First(state: 0), update: counting), effects: EffectRouter())
            let seconds = try await whileRunning(loop) {
                await Measure.seconds {
                    // Each sender on a processor of its own, so they really contend: unpinned, the scheduler
                    // often ran them one after the other, and the figure was bimodal (6.5M or 20M+).
                    let senders = (0..<2).map { processor in
                        OSThread {
                            Measure.pin(toProcessor: processor)
                            for event in events { loop.send(event) }
                        }
                    }
                    for sender in senders { sender.join() }
                }
            }
            lost += 2 * events.count - loop.report.eventsProcessed
            correct = correct && loop.state == 2 * total
            rates.append(Double(2 * events.count) / seconds)
            var raw = 0
            let rawSeconds = await Measure.seconds { for event in events + events { _ = counting(&raw, event) } }
            raws.append(Double(2 * events.count) / rawSeconds)
        }
        return Outcome(
            workload: "w5",
            title: "two senders on two threads pinned to two processors, \(2 * half) events",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: lost == 0 && correct,
            extra: [("lost", Double(lost))],
            rates: rates
        )
    }

    /// w6: loops created, run, stopped and released; memory retained afterwards.
    static func w6(_ sizes: Sizes) async throws -> Outcome {
        let total = sizes.w6Loops
        let batch = 1_000
        func cycle(_ count: Int) async throws -> Bool {
            var ok = true
            for start in stride(from: 0, to: count, by: batch) {
                ok =
                    try await withThrowingTaskGroup(of: Bool.self) { tasks in
                        for _ in start..<min(start + batch, count) {
                            tasks.addTask {
                                let loop = Loop(
                                    program: Program(first: First(state: 0), update: counting),
                                    effects: EffectRouter()
                                )
                                // `send` never waits, so the event may still be queued when it returns;
                                // once the loop has stopped, it must have been processed.
                                let accepted = try await whileRunning(loop) { loop.send(.increment).isAccepted }
                                return accepted && loop.state == 1 && loop.report.eventsProcessed == 1
                            }
                        }
                        return try await tasks.reduce(true) { $0 && $1 }
                    } && ok
            }
            return ok
        }
        // Warm up the allocator and the runtime's caches, then measure a full cycle.
        _ = try await cycle(batch)
        Measure.trimHeap()
        let before = Measure.status("VmRSS")
        let start = ContinuousClock.now
        let ok = try await cycle(total)
        let elapsed = ContinuousClock.now - start
        Measure.trimHeap()
        let after = Measure.status("VmRSS")
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Outcome(
            workload: "w6",
            title: "\(total) loops created, run, stopped, released",
            perSecond: Double(total) / seconds,
            rawPerSecond: 0,
            runs: 1,
            ok: ok,
            extra: [
                ("bytes_retained", Double(max(0, after - before))),
                ("bytes_retained_per_loop", Double(max(0, after - before)) / Double(total)),
            ]
        )
    }
}
