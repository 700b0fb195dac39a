package import LoopCore
package import LoopPersistence

/// The entities of the durable fault runs (the benchmark's `durable-node` processes, and the test that
/// kills them): an account applying signed amounts, refusing one that would take it below zero, and
/// answering each request with the balance after it (or -1 for a refusal). Each applied request is kept
/// in the state with its answer, so a test can check every key was applied once and answered as
/// recorded. One definition, so a test's pure replay is the program the processes ran.
package enum KeyedLedger {
    /// A request to apply `amount` under `key`.
    package enum Event: Codable, Sendable, Hashable {
        case apply(key: String, amount: Int, replyTo: ReplyTo<Int>)
    }

    /// What the account holds.
    package struct State: Codable, Sendable, Equatable {
        /// The balance.
        package var balance = 0
        /// Every request applied, in order: its key, its amount and its answer.
        package var applied: [Applied] = []

        package init() {}
    }

    /// A request applied.
    package struct Applied: Codable, Sendable, Equatable {
        package var key: String
        package var amount: Int
        package var answer: Int
    }

    /// The answer, as an effect.
    package enum Effect: Sendable, Equatable {
        case answer(Reply<Int>)
    }

    /// The program, answering requests.
    package static let program = DurableProgram<State, Event, Effect>(
        initial: State(),
        update: Update { state, event in
            switch event {
            case .apply(let key, let amount, let replyTo):
                let answer = state.balance + amount < 0 ? -1 : state.balance + amount
                if answer >= 0 { state.balance = answer }
                state.applied.append(Applied(key: key, amount: amount, answer: answer))
                return [.answer(replyTo.reply(answer))]
            }
        }
    )
    .replying { if case .answer(let reply) = $0 { reply } else { nil } }

    /// Request `index` of requester `requester`: its key, entity and amount, the same in every process.
    package static func request(_ index: Int, requester: Int, entities: Int) -> (key: String, entity: Int, amount: Int)
    {
        (
            "r\(requester)-\(index)", (index &* 7_919 &+ requester &* 104_729) % entities,
            index % 7 == 3 ? -25 : index % 10 + 1
        )
    }
}
