// The code of Docs/Cluster.md. Each region between `// snippet` and `// end snippet` is one code block
// of the guide, in order, as the guide shows it (`make lint` compares them; `swift .ci/guide-check.swift
// --write` copies them into the guide). What sits outside the regions is what a block needs around it
// to compile: the values a test uses, the parameters a fragment takes.

import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres
import LoopSupport
import Testing

/// The accounts of Docs/Persistence.md's first example, written again here: each guide is a module of
/// its own, as a reader's would be.
enum Account {
    enum Outcome: Codable, Hashable, Sendable {
        case done(balance: Int)
        case insufficient(balance: Int)
    }
    enum Event: Codable, Hashable, Sendable {
        case deposit(Int, replyTo: ReplyTo<Outcome>)
        case withdraw(Int, replyTo: ReplyTo<Outcome>)
    }
    struct State: Codable, Equatable, Sendable { var balance = 0 }
    enum Effect: Equatable, Sendable { case answer(Reply<Outcome>) }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .deposit(let amount, let replyTo):
            state.balance += amount
            return [.answer(replyTo.reply(.done(balance: state.balance)))]
        case .withdraw(let amount, let replyTo):
            guard amount <= state.balance else {
                return [.answer(replyTo.reply(.insufficient(balance: state.balance)))]
            }
            state.balance -= amount
            return [.answer(replyTo.reply(.done(balance: state.balance)))]
        }
    }

    static let program = DurableProgram(initial: State(), update: Update(update))
        .replying { if case .answer(let reply) = $0 { reply } else { nil } }
}

/// The guide's first example on the database `conninfo`; then, past the guide's code, a deposit and a
/// retry of the request under `requestID`, and the node's stop.
func askAccount17(
    conninfo: String,
    requestID: String
) async throws -> (outcome: Account.Outcome, deposited: Account.Outcome, retried: Account.Outcome) {
    // snippet
    // On every node: the accounts of Persistence.md's first example, one entity per account.
    let node = try await ClusterNode(
        connecting: conninfo,
        name: "node-a",
        program: Account.program,
        effects: EffectRouter(),
        events: JSONCodec<Account.Event>(),
        states: JSONCodec<Account.State>()
    )
    let running = Task { try await node.run() }

    // In any process that reaches the database:
    let accounts = try await ClusterClient(connecting: conninfo, events: JSONCodec<Account.Event>())
    let outcome: Account.Outcome = try await accounts.request(to: "account-17", key: requestID) {
        .withdraw(50, replyTo: $0)
    }
    // end snippet
    let deposited: Account.Outcome = try await accounts.request(to: "account-17", key: "deposit-1") {
        .deposit(80, replyTo: $0)
    }
    let retried: Account.Outcome = try await accounts.request(to: "account-17", key: requestID) {
        .withdraw(50, replyTo: $0)
    }
    await accounts.close()
    node.stop()
    _ = try await running.value
    return (outcome, deposited, retried)
}

/// On a throwaway PostgreSQL server (`TemporaryPostgres`, stopped when the test process exits) or the
/// one `EFFECTLOOP_POSTGRES` names.
@Test func aClientAsksAnEntityOnANodeAndARetryGetsTheFirstAnswer() async throws {
    let conninfo = try await TemporaryPostgres.shared().createDatabase()
    let (outcome, deposited, retried) = try await askAccount17(conninfo: conninfo, requestID: "req-17")
    #expect(outcome == .insufficient(balance: 0))
    #expect(deposited == .done(balance: 80))
    // The same key after the deposit: the answer recorded the first time, nothing withdrawn.
    #expect(retried == .insufficient(balance: 0))
}
