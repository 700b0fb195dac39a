import EffectHandlers
import LoopCore
import LoopRuntime
import LoopTesting
import Testing

/// A request's id, as a request handler would set it (a logger's metadata, a trace).
enum RequestID {
    @TaskLocal static var current: String?
}

/// Each event starts a synchronous and an asynchronous effect; the asynchronous one's handler sends a
/// follow-up event, whose effect runs too. Every handler records the request id it sees.
enum Scoped {
    enum Event: Sendable, Equatable {
        case start(Int)
        case followUp(Int)
        /// Its effect's synchronous handler throws; the router maps the error to `followUp`.
        case broken(Int)
    }

    enum Effect: Sendable, Hashable {
        case note(Int)
        case work(Int)
        case finish(Int)
        case explode(Int)
    }

    static let program = Program<[Int], Event, Effect>(
        first: First(state: []),
        update: Update { seen, event in
            switch event {
            case .start(let n): return [.note(n), .work(n)]
            case .followUp(let n):
                seen.append(n)
                return [.finish(n)]
            case .broken(let n): return [.explode(n)]
            }
        }
    )

    /// The request id each handler saw, by effect.
    /// `told`, if given, gets each event the scope is told of, with its context, and what the
    /// handlers had seen by then.
    static func router(
        _ seen: Locked<[Effect: String?]>,
        scoped: Bool = true,
        told: Locked<[(event: Event, id: String?, seenBefore: Int)]>? = nil
    ) -> EffectRouter<Effect, Event> {
        let router = EffectRouter<Effect, Event>()
            .route(
                { if case .note = $0 { $0 } else { nil } },
                to: ClosureSyncEffectHandler { effect, _ in seen.withLock { $0[effect] = RequestID.current } }
            )
            .route(
                { if case .work(let n) = $0 { n } else { nil } },
                to: ClosureEffectHandler { n, send in
                    seen.withLock { $0[.work(n)] = RequestID.current }
                    await Task.yield()
                    send(.followUp(n))
                }
            )
            .route(
                { if case .finish = $0 { $0 } else { nil } },
                to: ClosureEffectHandler { effect, _ in seen.withLock { $0[effect] = RequestID.current } }
            )
            .route(
                { if case .explode(let n) = $0 { n } else { nil } },
                to: ClosureSyncEffectHandler { _, _ in throw Exploded() }
            )
            .mapErrors { effect, _ in if case .explode(let n) = effect { .followUp(n) } else { nil } }
        guard scoped else { return router }
        return router.scoped(
            EffectScope<Effect>(
                capture: { RequestID.current },
                sync: { id, _, body in try RequestID.$current.withValue(id) { try body() } },
                async: { id, _, body in try await RequestID.$current.withValue(id) { try await body() } },
                event: told.map { told in
                    { id, event, _ in
                        let before = seen.withLock { $0.count }
                        if let event = event as? Event { told.withLock { $0.append((event, id, before)) } }
                    }
                }
            )
        )
    }
}

struct Exploded: Error {}

@Suite struct EffectScopeTests {
    @Test func theEventAFailureMapsToKeepsTheContextOfTheEffectThatFailed() async throws {
        let seen = Locked<[Scoped.Effect: String?]>([:])
        let loop = Loop(program: Scoped.program, effects: Scoped.router(seen))
        _ = try await running(loop) {
            await withTaskGroup(of: Void.self) { senders in
                for n in 0..<20 {
                    senders.addTask { RequestID.$current.withValue("request-\(n)") { _ = loop.send(.broken(n)) } }
                }
            }
            await waitUntil("every mapped failure's effect") { seen.withLock { $0.count } == 20 }
        }
        for n in 0..<20 { #expect(seen.withLock { $0[.finish(n)] } == .some("request-\(n)")) }
    }

    @Test func theSendersTaskLocalReachesEveryEffectItsEventCausesAndTheirFollowUps() async throws {
        let seen = Locked<[Scoped.Effect: String?]>([:])
        let loop = Loop(program: Scoped.program, effects: Scoped.router(seen))
        _ = try await running(loop) {
            // Concurrent senders, each with its own id: none sees another's.
            await withTaskGroup(of: Void.self) { senders in
                for n in 0..<20 {
                    senders.addTask { RequestID.$current.withValue("request-\(n)") { _ = loop.send(.start(n)) } }
                }
            }
            loop.send(.start(99))  // no request id set
            await waitUntil("every follow-up") { seen.withLock { $0.count } == 21 * 3 }
        }
        for n in 0..<20 {
            let expected: String?? = .some("request-\(n)")
            #expect(seen.withLock { $0[.note(n)] } == expected)
            #expect(seen.withLock { $0[.work(n)] } == expected)
            #expect(seen.withLock { $0[.finish(n)] } == expected)
        }
        #expect(seen.withLock { $0[.note(99)] } == .some(nil))
        #expect(seen.withLock { $0[.finish(99)] } == .some(nil))
    }

    @Test func withoutAScopeHandlersSeeTheLoopsOwnTaskLocalsNotTheSenders() async throws {
        let seen = Locked<[Scoped.Effect: String?]>([:])
        let loop = Loop(program: Scoped.program, effects: Scoped.router(seen, scoped: false))
        _ = try await running(loop) {
            RequestID.$current.withValue("request-1") { _ = loop.send(.start(1)) }
            await waitUntil("the follow-up") { seen.withLock { $0.count } == 3 }
        }
        // The asynchronous effects run in the loop's tasks: the sender's value is not there.
        #expect(seen.withLock { $0[.work(1)] } == .some(nil))
        #expect(seen.withLock { $0[.finish(1)] } == .some(nil))
    }

    @Test func theScopeIsToldOfEachEventWithItsContextBeforeItsEffectsRun() async throws {
        let seen = Locked<[Scoped.Effect: String?]>([:])
        let told = Locked<[(event: Scoped.Event, id: String?, seenBefore: Int)]>([])
        let loop = Loop(program: Scoped.program, effects: Scoped.router(seen, told: told))
        _ = try await running(loop) {
            RequestID.$current.withValue("request-1") { _ = loop.send(.start(1)) }
            await waitUntil("the follow-up's effect") { seen.withLock { $0.count } == 3 }
        }
        let events = told.withLock { $0 }
        // Every event, the follow-up too, with the context it carries; told before any of its effects ran.
        #expect(events.map(\.event) == [.start(1), .followUp(1)])
        #expect(events.map(\.id) == ["request-1", "request-1"])
        #expect(events.map(\.seenBefore) == [0, 2])
    }

    @Test func aGroupCarriesEachSendersContextToItsEntitysEffects() async throws {
        let seen = Locked<[Scoped.Effect: String?]>([:])
        let group = LoopGroup<String, [Int], Scoped.Event, Scoped.Effect>(
            program: { _ in Scoped.program },
            effects: Scoped.router(seen)
        )
        let running = Task { try await group.run() }
        await waitUntil("the group to run") { group.isRunning }
        for n in 0..<10 {
            RequestID.$current.withValue("request-\(n)") { _ = group.send(.start(n), to: "entity-\(n % 3)") }
        }
        await waitUntil("every follow-up") { seen.withLock { $0.count } == 30 }
        group.stop()
        _ = try await running.value
        for n in 0..<10 { #expect(seen.withLock { $0[.finish(n)] } == .some("request-\(n)")) }
    }
}
