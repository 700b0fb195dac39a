internal import Foundation
internal import LoopCore
public import LoopRuntime

/// How the service turns HTTP input into commands and answers into HTTP responses: plain functions of
/// values, tested without a server (`TranslationTests`). Bad input is refused here, before anything
/// reaches an account, so it records nothing.
public enum Translation {
    /// The largest request body the service reads: larger ones get 413 before they are read.
    public static let largestBody = 4_096
    /// The longest account id.
    public static let longestID = 64
    /// The longest request id (the durable group accepts up to 1,024 bytes; the service asks less).
    public static let longestRequestID = 200

    /// A response: its status and its JSON body.
    public struct Response: Equatable, Sendable {
        /// The HTTP status code.
        public var status: Int
        /// The body, a JSON object.
        public var body: [String: Value]

        /// A JSON value of a response: a string or an integer.
        public enum Value: Equatable, Sendable, Encodable {
            /// A string.
            case string(String)
            /// An integer.
            case integer(Int)

            public func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                switch self {
                case .string(let text): try container.encode(text)
                case .integer(let number): try container.encode(number)
                }
            }
        }

        /// A response with `status` and `body`.
        public init(status: Int, _ body: [String: Value]) {
            self.status = status
            self.body = body
        }

        /// An error response: `{"code": code, "error": message}`: `code` is stable, for programs (two
        /// refusals with one status tell apart by it); `message` is for people.
        static func error(_ status: Int, _ code: String, _ message: String, balance: Int? = nil) -> Response {
            var body: [String: Value] = ["code": .string(code), "error": .string(message)]
            if let balance { body["balance"] = .integer(balance) }
            return Response(status: status, body)
        }

        /// The body as JSON bytes, keys sorted.
        public var json: [UInt8] {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return Array((try? encoder.encode(body)) ?? Data("{}".utf8))
        }
    }

    /// An account id from a request's path: 1 to 64 letters, digits, `-` or `_` (so that no id is a
    /// path, or a name a log or a stream could misread); otherwise the 400 to answer.
    public static func accountID(_ text: String) -> Result<String, Refusal> {
        guard !text.isEmpty, text.utf8.count <= longestID,
            text.utf8.allSatisfy({ byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            })
        else {
            return .failure(
                Refusal(.error(400, "invalid_account_id", "an account id is 1 to \(longestID) letters, digits, - or _"))
            )
        }
        return .success(text)
    }

    /// A request id from the `Idempotency-Key` header: absent (not idempotent), or 1 to 200 printable
    /// ASCII characters; otherwise the 400 to answer.
    public static func requestID(_ header: String?) -> Result<String?, Refusal> {
        guard let header else { return .success(nil) }
        guard !header.isEmpty, header.utf8.count <= longestRequestID,
            header.utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else {
            return .failure(
                Refusal(
                    .error(
                        400,
                        "invalid_idempotency_key",
                        "an Idempotency-Key is 1 to \(longestRequestID) printable ASCII characters"
                    )
                )
            )
        }
        return .success(header)
    }

    /// The command a deposit or withdrawal body (`{"amount": N}`, N a whole number from 1 to 10^12)
    /// asks for; otherwise the 400 (not JSON, not UTF-8, no integer amount) or 422 (an amount out of
    /// range) to answer.
    public static func command(_ kind: Kind, body: [UInt8]) -> Result<Account.Command, Refusal> {
        struct Body: Decodable { var amount: Int }
        guard String(validating: body, as: UTF8.self) != nil else {
            return .failure(Refusal(.error(400, "body_not_utf8", "the body is not UTF-8")))
        }
        guard let decoded = try? JSONDecoder().decode(Body.self, from: Data(body)) else {
            return .failure(
                Refusal(.error(400, "body_not_an_amount", "the body must be a JSON object with an integer \"amount\""))
            )
        }
        guard (1...Account.largestAmount).contains(decoded.amount) else {
            return .failure(
                Refusal(.error(422, "amount_out_of_range", "the amount must be from 1 to \(Account.largestAmount)"))
            )
        }
        switch kind {
        case .deposit: return .success(.deposit(decoded.amount))
        case .withdraw: return .success(.withdraw(decoded.amount))
        }
    }

    /// Which command a route asks for.
    public enum Kind: Sendable {
        /// `POST /accounts/{id}/deposit`.
        case deposit
        /// `POST /accounts/{id}/withdraw`.
        case withdraw
    }

    /// Input refused: the response that says why.
    public struct Refusal: Error, Equatable {
        /// The response to send.
        public var response: Response

        /// A refusal answered by `response`.
        public init(_ response: Response) { self.response = response }
    }

    /// The response to an account's answer: 200 with the balance, 409 for a withdrawal the balance does
    /// not cover, 422 for a deposit that would overflow it.
    public static func response(to outcome: Account.Outcome) -> Response {
        switch outcome {
        case .done(let balance): Response(status: 200, ["balance": .integer(balance)])
        case .insufficient(let balance): .error(409, "insufficient_funds", "insufficient funds", balance: balance)
        case .overflow(let balance): .error(422, "balance_overflow", "the balance would overflow", balance: balance)
        case .invalidAmount(let balance):
            .error(422, "amount_out_of_range", "the amount must be positive", balance: balance)
        }
    }

    /// The response to a request that got no answer: 503 when the service cannot take it now
    /// (stopping, its store failed), 504 when the answer did not come in time (the deposit may still
    /// be applied: retry with the same request id), 422 for a request id reused for a different
    /// request, and 500 for what only a fault of the service causes (a request the group finds invalid
    /// although the input was checked, an answer the program never gave), without internal detail.
    public static func response(to error: RequestError) -> Response {
        switch error {
        case .timedOut: .error(504, "timed_out", "no answer in time; retry with the same Idempotency-Key")
        case .keyReused: .error(422, "idempotency_key_reused", "this Idempotency-Key was used for a different request")
        case .invalid, .rejected(.invalid): .error(500, "service_fault", "the service failed to take the request")
        case .rejected(let rejection) where rejection == .inboxFull: .error(503, "too_busy", "too busy; retry later")
        case .rejected, .loopStopped, .cancelled: .error(503, "unavailable", "the service is stopping or unavailable")
        case .storeFailed: .error(503, "store_failed", "the account's store failed")
        case .unanswered: .error(500, "service_fault", "the account did not answer")
        }
    }
}
