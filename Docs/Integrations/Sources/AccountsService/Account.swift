public import LoopCore
public import LoopPersistence

/// An account: the example service's one kind of entity, and all of its business logic. A pure update,
/// tested with plain value assertions (`AccountTests`); the HTTP layer only translates.
public enum Account {
    /// The largest amount one request may move: 10^12 (cents), far below `Int.max`, so that no single
    /// request is refused for a reason the client cannot see.
    public static let largestAmount = 1_000_000_000_000

    /// What a caller asks of an account.
    public enum Command: Codable, Hashable, Sendable {
        /// Adds `amount` (positive) to the balance.
        case deposit(Int)
        /// Takes `amount` (positive) from the balance, if it holds that much.
        case withdraw(Int)
    }

    /// The answer to a command, decided by the update and released once its event is on disk.
    public enum Outcome: Codable, Hashable, Sendable {
        /// Applied: the balance after it.
        case done(balance: Int)
        /// A withdrawal refused: the balance holds less than it asked.
        case insufficient(balance: Int)
        /// A deposit refused: the balance would pass `Int.max`.
        case overflow(balance: Int)
        /// Refused: the amount is not positive (the HTTP layer refuses those before they get here).
        case invalidAmount(balance: Int)
    }

    /// What is recorded: a command and where its answer goes.
    public enum Event: Codable, Hashable, Sendable {
        /// `command`, answered at `replyTo`.
        case command(Command, replyTo: ReplyTo<Outcome>)
    }

    /// An account's state.
    public struct State: Codable, Equatable, Sendable {
        /// The balance, never negative.
        public var balance: Int

        /// An account with `balance`.
        public init(balance: Int = 0) { self.balance = balance }
    }

    /// What the update asks for: only answers.
    public enum Effect: Equatable, Sendable {
        /// The answer to a command.
        case answer(Reply<Outcome>)
    }

    /// Decides a command: the new balance and the answer, as values.
    public static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .command(.deposit(let amount), let replyTo):
            guard amount > 0 else { return [.answer(replyTo.reply(.invalidAmount(balance: state.balance)))] }
            let (sum, overflow) = state.balance.addingReportingOverflow(amount)
            guard !overflow else { return [.answer(replyTo.reply(.overflow(balance: state.balance)))] }
            state.balance = sum
            return [.answer(replyTo.reply(.done(balance: state.balance)))]
        case .command(.withdraw(let amount), let replyTo):
            guard amount > 0 else { return [.answer(replyTo.reply(.invalidAmount(balance: state.balance)))] }
            guard amount <= state.balance else {
                return [.answer(replyTo.reply(.insufficient(balance: state.balance)))]
            }
            state.balance -= amount
            return [.answer(replyTo.reply(.done(balance: state.balance)))]
        }
    }

    /// Which effect is an answer: how the durable group finds the replies it releases after commit.
    public static func answer(_ effect: Effect) -> Reply<Outcome>? {
        switch effect {
        case .answer(let reply): reply
        }
    }

    /// The stream (and, in a cluster, the entity) of the account `id`.
    public static func stream(of id: String) -> String { "account-\(id)" }

    /// The durable program of every account.
    public static let program = DurableProgram(initial: State(), update: Update(update)).replying(answer)
}
