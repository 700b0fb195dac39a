// The code of Sources/EffectHandlers/EffectHandlers.docc/EffectHandlers.md (see LoopCore.swift).

import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

/// The EffectHandlers page: a payment handler, and the router that sends it the charges.
enum HandlersPage {
    struct State: Equatable, Sendable { var failures: [String] = [] }
    enum Event: Equatable, Sendable {
        case buy(Int)
        case failed(String, String)
    }
    enum Effect: Equatable, Sendable { case charge(Int) }

    struct Declined: Error {}

    /// The payment provider: refuses what is not a positive amount.
    struct PaymentAPI: Sendable {
        func charge(_ amount: Int) async throws { if amount <= 0 { throw Declined() } }
    }

    struct PaymentHandler: EffectHandler {
        let api: PaymentAPI
        func handle(_ amount: Int, send: Send<Event>) async throws { try await api.charge(amount) }
    }

    static func router(api: PaymentAPI) -> EffectRouter<Effect, Event> {
        // snippet
        let router = EffectRouter<Effect, Event>()
            .route({ if case .charge(let amount) = $0 { amount } else { nil } }, to: PaymentHandler(api: api))
            .mapErrors { effect, error in .failed("\(effect)", "\(error)") }
        // end snippet
        return router
    }

    @Test static func aFailedChargeComesBackAsAnEvent() async throws {
        let program = Program(
            first: First(state: State()),
            update: Update<State, Event, Effect> { state, event in
                switch event {
                case .buy(let amount): return [.charge(amount)]
                case .failed(let effect, _):
                    state.failures.append(effect)
                    return []
                }
            }
        )
        let loop = Loop(program: program, effects: router(api: PaymentAPI()))
        try loop.start()
        loop.send(.buy(5))
        loop.send(.buy(-1))
        for await state in loop.states where !state.failures.isEmpty { break }
        loop.stop()
        _ = await loop.waitUntilStopped()
        #expect(loop.state == State(failures: ["charge(-1)"]))
    }
}
