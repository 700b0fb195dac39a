// The code of Sources/LoopPersistence/LoopPersistence.docc/LoopPersistence.md (see LoopCore.swift).

import EffectHandlers
import LoopCore
import LoopPersistence

/// The LoopPersistence page: accounts as durable entities on the file store.
enum PersistencePage {
    typealias AccountID = String

    struct Account: Codable, Equatable, Sendable {
        var balance = 0

        enum Outcome: Codable, Equatable, Sendable {
            case done(balance: Int)
            case insufficient(balance: Int)
        }
        enum Event: Codable, Equatable, Sendable { case withdraw(Int, replyTo: ReplyTo<Outcome>) }
        enum Effect: Equatable, Sendable { case answer(Reply<Outcome>) }

        static func update(_ account: inout Account, _ event: Event) -> [Effect] {
            switch event {
            case .withdraw(let amount, let replyTo):
                guard amount <= account.balance else {
                    return [.answer(replyTo.reply(.insufficient(balance: account.balance)))]
                }
                account.balance -= amount
                return [.answer(replyTo.reply(.done(balance: account.balance)))]
            }
        }
    }

    /// Compiled, not run: the group is not running, so the request would wait for its timeout.
    static func withdraw(
        router: EffectRouter<Account.Effect, Account.Event>,
        id: AccountID,
        requestID: String
    ) async throws -> Account.Outcome {
        // snippet
        let store = try FileEventStore(directory: "/var/lib/accounts")
        let accounts = DurableLoopGroup<AccountID, Account, Account.Event, Account.Effect>(
            program: DurableProgram(initial: Account(), update: Update(Account.update))
                .replying { if case .answer(let reply) = $0 { reply } else { nil } },
            effects: router,
            store: store
        )
        // Answered once the event that decided it is on disk; a repeat of the key gets the same answer.
        let outcome = try await accounts.request(to: id, key: requestID) { .withdraw(50, replyTo: $0) }
        // end snippet
        return outcome
    }
}
