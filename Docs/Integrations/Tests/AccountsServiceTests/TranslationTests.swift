import AccountsService
import LoopCore
import LoopRuntime
import Testing

/// The HTTP layer's translation, as values: what bad input gets, and which status each answer and each
/// `RequestError` becomes.
@Suite struct TranslationTests {
    @Test(arguments: ["alice", "a-1_B", String(repeating: "x", count: 64)])
    func aPlainIDIsTaken(id: String) {
        #expect(Translation.accountID(id) == .success(id))
    }

    @Test(arguments: ["", "..", "../etc", "a/b", "a b", "é", "a\u{0}", String(repeating: "x", count: 65)])
    func anIDThatCouldBeAPathOrIsNotPlainIsRefused(id: String) {
        guard case .failure(let refusal) = Translation.accountID(id) else {
            Issue.record("\(id) was taken")
            return
        }
        #expect(refusal.response.status == 400)
    }

    @Test func aRequestIDIsOptionalAndBounded() {
        #expect(Translation.requestID(nil) == .success(nil))
        #expect(Translation.requestID("key-1") == .success("key-1"))
        for bad in ["", "a b", "\u{7F}", "é", String(repeating: "k", count: 201)] {
            guard case .failure(let refusal) = Translation.requestID(bad) else {
                Issue.record("\(bad) was taken")
                continue
            }
            #expect(refusal.response.status == 400)
        }
    }

    @Test func aBodyWithAnAmountInRangeIsACommand() {
        #expect(Translation.command(.deposit, body: Array(#"{"amount": 5}"#.utf8)) == .success(.deposit(5)))
        #expect(
            Translation.command(.withdraw, body: Array(#"{"amount":1000000000000}"#.utf8))
                == .success(.withdraw(1_000_000_000_000))
        )
    }

    @Test(arguments: [
        #"not json"#, #"{"amount": "5"}"#, #"{"amount": 1.5}"#, #"{"amount": 99999999999999999999}"#,
        #"{"amount": 1e30}"#, #"{}"#, #"[5]"#, "",
    ])
    func aBodyThatIsNotAnIntegerAmountIs400(body: String) {
        guard case .failure(let refusal) = Translation.command(.deposit, body: Array(body.utf8)) else {
            Issue.record("\(body) was taken")
            return
        }
        #expect(refusal.response.status == 400)
    }

    @Test func aBodyThatIsNotUTF8Is400() {
        guard case .failure(let refusal) = Translation.command(.deposit, body: [0x7B, 0xFF, 0xFE, 0x7D]) else {
            Issue.record("invalid UTF-8 was taken")
            return
        }
        #expect(refusal.response.status == 400)
    }

    @Test(arguments: [0, -5, 1_000_000_000_001, Int.max])
    func anAmountOutOfRangeIs422(amount: Int) {
        guard case .failure(let refusal) = Translation.command(.withdraw, body: Array(#"{"amount": \#(amount)}"#.utf8))
        else {
            Issue.record("\(amount) was taken")
            return
        }
        #expect(refusal.response.status == 422 && refusal.response.body["code"] == .string("amount_out_of_range"))
    }

    @Test func eachAnswerHasItsStatus() {
        #expect(Translation.response(to: .done(balance: 3)) == .init(status: 200, ["balance": .integer(3)]))
        #expect(Translation.response(to: .insufficient(balance: 3)).status == 409)
        #expect(Translation.response(to: .insufficient(balance: 3)).body["balance"] == .integer(3))
        #expect(Translation.response(to: .overflow(balance: 3)).status == 422)
        #expect(Translation.response(to: .invalidAmount(balance: 3)).status == 422)
        // One status, several causes: the code tells them apart.
        #expect(Translation.response(to: .insufficient(balance: 3)).body["code"] == .string("insufficient_funds"))
        #expect(Translation.response(to: .overflow(balance: 3)).body["code"] == .string("balance_overflow"))
        #expect(Translation.response(to: .keyReused("k")).body["code"] == .string("idempotency_key_reused"))
    }

    @Test func eachRequestErrorHasItsStatus() {
        let cases: [(RequestError, Int, String)] = [
            (.timedOut(after: .seconds(1)), 504, "timed_out"),
            (.keyReused("k"), 422, "idempotency_key_reused"),
            (.invalid("a key over 1,024 bytes"), 500, "service_fault"),
            (.rejected(.invalid), 500, "service_fault"),
            (.rejected(.inboxFull), 503, "too_busy"),
            (.rejected(.stopping), 503, "unavailable"),
            (.rejected(.stopped), 503, "unavailable"),
            (.rejected(.failed), 503, "unavailable"),
            (.loopStopped, 503, "unavailable"),
            (.cancelled, 503, "unavailable"),
            (.storeFailed("disk full"), 503, "store_failed"),
            (.unanswered, 500, "service_fault"),
        ]
        for (error, status, code) in cases {
            let response = Translation.response(to: error)
            #expect(response.status == status && response.body["code"] == .string(code), "\(error)")
            // A fault of the service shows no internal detail.
            if status == 500 { #expect(!"\(response.body)".contains("1,024")) }
        }
    }

    @Test func aResponseIsJSONWithSortedKeys() {
        let response = Translation.response(to: .insufficient(balance: 3))
        #expect(
            String(decoding: response.json, as: UTF8.self)
                == #"{"balance":3,"code":"insufficient_funds","error":"insufficient funds"}"#
        )
    }
}
