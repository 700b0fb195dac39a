import EffectHandlers
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopTesting
import Testing

@Suite struct DurableLoopGroupTests {
    typealias Ledgers = DurableLoopGroup<String, Ledger.State, Ledger.Event, Ledger.Effect>

    /// A charge handler that does not care which entity asked: the group's tests check states only.
    static let router = EffectRouter<Ledger.Effect, Ledger.Event>()
        .route(
            { if case .charge(let amount) = $0 { amount } else { nil } },
            to: ClosureSyncEffectHandler { amount, send in send(.charged(amount)) }
        )

    func group(
        _ store: any EventStore,
        passivation: Ledgers.Passivation = .never,
        clock: any Clock<Duration> = ContinuousClock()
    ) -> Ledgers {
        Ledgers(program: Ledger.program, effects: Self.router, store: store, passivation: passivation, clock: clock)
    }

    @Test func entitiesRecoverOnTheirFirstEventAfterARestart() async throws {
        let store = InMemoryEventStore()
        let first = group(store)
        let running = Task { try await first.run() }
        #expect(try await first.sendDurably(.add(2), to: "a") == 1)
        #expect(try await first.sendDurably(.add(3), to: "b") == 1)
        #expect(try await first.sendDurably(.add(4), to: "a") == 3)
        first.stop()
        _ = try await running.value

        let second = group(store)
        let again = Task { try await second.run() }
        #expect(second.state(of: "a") == nil)
        #expect(try await second.sendDurably(.add(10), to: "a") == 5)
        #expect(second.state(of: "a")?.total == 16)
        #expect(second.state(of: "b") == nil)
        second.stop()
        _ = try await again.value
    }

    @Test func beyondItsCapTheGroupPassivatesQuietEntitiesAndRecoversThemTransparently() async throws {
        let store = InMemoryEventStore()
        let ledgers = group(store, passivation: .init(maximumLive: 2))
        let running = Task { try await ledgers.run() }
        for round in 1...3 {
            for id in ["a", "b", "c", "d", "e"] {
                _ = try await ledgers.sendDurably(.add(round), to: id)
                await eventually("\(id) quiet") { ledgers.state(of: id)?.uncharged.isEmpty ?? true }
            }
        }
        #expect(ledgers.count <= 3)
        #expect(ledgers.passivations >= 10)
        for id in ["a", "b", "c", "d", "e"] {
            _ = try await ledgers.sendDurably(.add(0), to: id)
            #expect(ledgers.state(of: id)?.total == 6, "\(id)")
        }
        ledgers.stop()
        _ = try await running.value
    }

    @Test func idleEntitiesArePassivatedOnTheInjectedClock() async throws {
        let clock = ManualClock()
        let ledgers = group(InMemoryEventStore(), passivation: .init(idleAfter: .seconds(60)), clock: clock)
        let running = Task { try await ledgers.run() }
        _ = try await ledgers.sendDurably(.add(1), to: "a")
        await eventually("a quiet") { ledgers.state(of: "a")?.uncharged.isEmpty == true }
        await clock.sleepers(atLeast: 1)
        clock.advance(by: .seconds(60))
        await clock.sleepers(atLeast: 1)
        // One sweep is not enough: "a" got an event during the interval before it.
        #expect(ledgers.count == 1)
        _ = try await ledgers.sendDurably(.add(1), to: "b")
        await eventually("b quiet") { ledgers.state(of: "b")?.uncharged.isEmpty == true }
        clock.advance(by: .seconds(60))
        await eventually("a passivated") { ledgers.state(of: "a") == nil }
        #expect(ledgers.state(of: "b") != nil)
        #expect(try await ledgers.sendDurably(.add(1), to: "a") == 3)
        #expect(ledgers.state(of: "a")?.total == 2)
        ledgers.stop()
        _ = try await running.value
    }

    /// Passivation races senders: every event is applied exactly once, whatever the interleaving.
    @Test func passivationUnderConcurrentSendsLosesAndRepeatsNothing() async throws {
        let store = InMemoryEventStore()
        let ledgers = group(store, passivation: .init(maximumLive: 1))
        let running = Task { try await ledgers.run() }
        let ids = ["a", "b", "c"]
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for id in ids {
                tasks.addTask {
                    for round in 0..<100 {
                        _ = try await ledgers.sendDurably(.add(1), to: id)
                        // Every few rounds, wait until the entity is quiet and release it by hand too, while
                        // the other senders' sends release it by the cap.
                        if round % 10 == 0 {
                            await eventually("\(id) quiet") { ledgers.underlying.state(of: id)?.isQuiet ?? true }
                            ledgers.passivate(id)
                        }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        ledgers.stop()
        _ = try await running.value
        for id in ids {
            var state = Ledger.State()
            for try await stored in store.events(of: id) {
                _ = Ledger.update(&state, try BinaryCodec<Ledger.Event>().decode(stored.payload))
            }
            #expect(state.total == 100, "\(id)")
        }
        #expect(ledgers.passivations >= 10)
    }

    /// An entity whose stream no longer decodes refuses events; the others go on.
    @Test func aFailedEntityIsRefusedAndTheOthersAreUnaffected() async throws {
        let store = InMemoryEventStore()
        _ = try await store.append([Array("not json".utf8)], to: "broken", expecting: 0)
        let ledgers = group(store)
        let running = Task { try await ledgers.run() }
        await #expect(throws: DurableLoopError.self) { try await ledgers.sendDurably(.add(1), to: "broken") }
        #expect(
            ledgers.failedStreams["broken"]?.description.hasPrefix(
                "stream 'broken': the event at version 1 does not decode"
            ) == true
        )
        #expect(ledgers.send(.add(1), to: "broken") == .rejected(.failed))
        #expect(try await ledgers.sendDurably(.add(1), to: "fine") == 1)
        ledgers.stop()
        _ = try await running.value
    }
}
