import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// Every event returns effects of every kind: one that runs inline, one in a task, two that wait
/// behind their key, two of which the second cancels the first, two of which the second is dropped,
/// one that fails, and, every fifth event, one that cancels the waiting ones. Concurrent senders, then a
/// graceful stop; the ids must name each effect exactly, whatever happened to it.
enum Burst {
    enum Event: Sendable {
        case burst(Int)
    }

    enum Effect: ManagedEffect, Hashable {
        case note(Int)
        case work(Int)
        case queued(Int)
        case newest(Int)
        case once(Int)
        case fail(Int)
        case clearQueue(Int)

        var isNewest: Bool { if case .newest = self { true } else { false } }

        var lifecycle: EffectLifecycle {
            switch self {
            case .note, .work, .fail: .concurrent()
            case .queued: .serial("queue")
            case .newest: .latest("newest")
            case .once: .dropIfRunning("once")
            case .clearQueue: .cancel("queue")
            }
        }
    }

    struct Failed: Error {}

    static let program = Program<Int, Event, Effect>(
        first: First(state: 0),
        update: Update { count, event in
            guard case .burst(let n) = event else { return [] }
            count += 1
            let effects: [Effect] = [
                .note(n), .work(n), .queued(n), .queued(n), .newest(n), .newest(n), .once(n), .once(n), .fail(n),
            ]
            return n % 5 == 0 ? effects + [.clearQueue(n)] : effects
        }
    )

    static let router = EffectRouter<Effect, Event>()
        .route({ if case .note = $0 { $0 } else { nil } }, to: ClosureSyncEffectHandler { _, _ in })
        .route(
            { effect -> Effect? in
                switch effect {
                case .work, .queued, .newest, .once: effect
                default: nil
                }
            },
            to: ClosureEffectHandler { _, _ in
                await Task.yield()
                try Task.checkCancellation()
            }
        )
        .route(
            { if case .fail = $0 { $0 } else { nil } },
            to: ClosureEffectHandler { _, _ in
                await Task.yield()
                throw Failed()
            }
        )

    /// What the observer saw: each event's effects with the first one's id, and each effect activity as
    /// its kind, id and effect, in the order they were reported.
    final class Seen: Sendable {
        let events = Locked<[(effects: [Effect], first: EffectID)]>([])
        let activities = Locked<[(kind: String, id: EffectID, effect: Effect)]>([])

        func record(_ activity: LoopActivity<Event, Effect>) {
            let entry: (String, EffectID, Effect)?
            switch activity {
            case .eventProcessed(_, _, _, _, let effects, let first):
                events.withLock { $0.append((effects, first)) }
                entry = nil
            case .effectStarted(let effect, let id, _): entry = ("started", id, effect)
            case .effectCompleted(let effect, let id, _): entry = ("completed", id, effect)
            case .effectFailed(let effect, let id, _, _, _): entry = ("failed", id, effect)
            case .effectCancelled(let effect, let id): entry = ("cancelled", id, effect)
            case .effectTimedOut(let effect, let id, _, _): entry = ("timedOut", id, effect)
            case .effectAbandoned(let effect, let id): entry = ("abandoned", id, effect)
            case .effectDropped(let effect, let id): entry = ("dropped", id, effect)
            default: entry = nil
            }
            if let entry { activities.withLock { $0.append(entry) } }
        }
    }
}

@Suite struct EffectIDTests {
    @Test func everyEffectsActivitiesCarryItsOwnIdWhateverHappensToIt() async throws {
        let seen = Burst.Seen()
        let loop = Loop(
            program: Burst.program,
            effects: Burst.router,
            observer: ClosureLoopObserver { seen.record($0) }
        )
        let report = try await running(loop) {
            await withTaskGroup(of: Void.self) { senders in
                for sender in 0..<4 {
                    senders.addTask {
                        for n in stride(from: sender, to: 400, by: 4) {
                            loop.send(.burst(n))
                            if n % 16 == 0 { await Task.yield() }
                        }
                    }
                }
            }
        }
        #expect(report.eventsProcessed == 400)

        // The events' ids: consecutive ranges, from 1, none shared, covering every effect returned.
        let events = seen.events.withLock { $0 }
        var byID: [EffectID: Burst.Effect] = [:]
        for event in events {
            for (offset, effect) in event.effects.enumerated() {
                #expect(byID.updateValue(effect, forKey: event.first.advanced(by: offset)) == nil)
            }
        }
        let total = events.reduce(0) { $0 + $1.effects.count }
        #expect(byID.count == total)
        #expect(Set(byID.keys) == Set((1...UInt64(total)).map { EffectID(rawValue: $0) }))

        // Each activity names the effect its id was given to.
        let activities = seen.activities.withLock { $0 }
        for activity in activities {
            #expect(byID[activity.id] == activity.effect, "\(activity)")
        }
        // Each effect with any activity: started at most once, ended exactly once, after its start.
        let ends: Set = ["completed", "failed", "cancelled", "timedOut", "abandoned", "dropped"]
        for (id, effect) in byID {
            let mine = activities.filter { $0.id == id }.map(\.kind)
            if case .clearQueue = effect {
                // A `cancel` effect starts nothing of its own; the effects it cancels report that.
                #expect(mine.isEmpty)
                continue
            }
            #expect(mine.filter { $0 == "started" }.count <= 1, "\(effect): \(mine)")
            #expect(mine.filter { ends.contains($0) }.count == 1, "\(effect): \(mine)")
            if let start = mine.firstIndex(of: "started"), let end = mine.firstIndex(where: ends.contains) {
                #expect(start < end, "\(effect): \(mine)")
            }
            if mine.contains("dropped") { #expect(!mine.contains("started"), "\(effect): \(mine)") }
        }
        // Each event's second `once` is dropped and its first `newest` cancelled, whatever the timing.
        #expect(activities.filter { $0.kind == "dropped" }.count >= 400)
        #expect(activities.filter { $0.kind == "cancelled" && $0.effect.isNewest }.count >= 400)
        // The report counts what the activities show.
        #expect(activities.filter { $0.kind == "started" }.count == report.effectsStarted)
        #expect(activities.filter { $0.kind == "failed" }.count == report.effectsFailed)
        #expect(activities.filter { $0.kind == "dropped" }.count == report.effectsDropped)
    }
}
