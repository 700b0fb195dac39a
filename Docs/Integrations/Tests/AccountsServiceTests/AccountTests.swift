import AccountsService
import LoopCore
import Testing

/// The accounts' business logic, as values: no server, no store.
@Suite struct AccountTests {
    let replyTo = ReplyTo<Account.Outcome>(id: 1)

    func decide(_ balance: Int, _ command: Account.Command) -> (Account.State, [Account.Effect]) {
        var state = Account.State(balance: balance)
        let effects = Account.update(&state, .command(command, replyTo: replyTo))
        return (state, effects)
    }

    @Test func aDepositAddsAndAnswersTheNewBalance() {
        let (state, effects) = decide(5, .deposit(7))
        #expect(state == Account.State(balance: 12))
        #expect(effects == [.answer(replyTo.reply(.done(balance: 12)))])
    }

    @Test func aWithdrawalTheBalanceCoversIsApplied() {
        let (state, effects) = decide(5, .withdraw(5))
        #expect(state == Account.State(balance: 0))
        #expect(effects == [.answer(replyTo.reply(.done(balance: 0)))])
    }

    @Test func aWithdrawalOverTheBalanceIsRefusedAndChangesNothing() {
        let (state, effects) = decide(5, .withdraw(6))
        #expect(state == Account.State(balance: 5))
        #expect(effects == [.answer(replyTo.reply(.insufficient(balance: 5)))])
    }

    @Test func aDepositThatWouldOverflowIsRefusedAndChangesNothing() {
        let (state, effects) = decide(Int.max - 1, .deposit(2))
        #expect(state == Account.State(balance: Int.max - 1))
        #expect(effects == [.answer(replyTo.reply(.overflow(balance: Int.max - 1)))])
    }

    @Test(arguments: [0, -1, Int.min])
    func anAmountThatIsNotPositiveIsRefused(amount: Int) {
        for command in [Account.Command.deposit(amount), .withdraw(amount)] {
            let (state, effects) = decide(5, command)
            #expect(state == Account.State(balance: 5))
            #expect(effects == [.answer(replyTo.reply(.invalidAmount(balance: 5)))])
        }
    }
}
