/// Where the answer to one request goes: a value the caller puts into the event it sends, which the
/// update keeps (in its state, while it waits for an effect) or answers at once with ``reply(_:)``.
///
/// The reply is an effect like any other, so a test asserts it as a value, with a `ReplyTo` made for
/// the test:
///
/// ```swift
/// enum Event { case quote(Item, replyTo: ReplyTo<Price>) }
/// enum Effect: Equatable { case answer(Reply<Price>) }
///
/// let replyTo = ReplyTo<Price>(id: 1)
/// #expect(update(state, .quote(.book, replyTo: replyTo)) == Next(state, [.answer(replyTo.reply(12))]))
/// ```
///
/// The runtime makes the real ones (`Loop.request`, in `LoopRuntime`), and delivers a reply when the
/// router's `replies(_:)` route performs it. Two `ReplyTo`s are equal when they have the same id.
public struct ReplyTo<Value: Sendable>: Sendable, Hashable, CustomStringConvertible {
    /// The request's id, unique within the process for the runtime's requests.
    public let id: UInt64
    /// Where the runtime delivers the reply; `nil` for one made by a test, whose replies go nowhere.
    package let channel: (any ReplyChannel<Value>)?

    /// A reply address that goes nowhere, for tests of an update: its replies are values to compare.
    public init(id: UInt64) {
        self.id = id
        self.channel = nil
    }

    /// A reply address whose replies go to `channel`: how the runtime makes one.
    @usableFromInline
    package init(id: UInt64, channel: any ReplyChannel<Value>) {
        self.id = id
        self.channel = channel
    }

    /// The reply carrying `value` to this request, as an effect value for the update to return.
    @inlinable
    public func reply(_ value: Value) -> Reply<Value> {
        Reply(to: self, value: value)
    }

    /// Equal when the ids are equal.
    public static func == (lhs: ReplyTo, rhs: ReplyTo) -> Bool { lhs.id == rhs.id }

    /// Hashes the id.
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// `ReplyTo(#id)`.
    public var description: String { "ReplyTo(#\(id))" }
}

/// The answer to one request: a value the update returns as (part of) an effect, performed by the
/// router's `replies(_:)` route, which hands it to the waiting caller.
public struct Reply<Value: Sendable>: Sendable, CustomStringConvertible {
    /// The request it answers.
    public let to: ReplyTo<Value>
    /// The answer.
    public let value: Value

    /// The reply carrying `value` to `to`.
    public init(to: ReplyTo<Value>, value: Value) {
        self.to = to
        self.value = value
    }

    /// Hands the value to the caller waiting for it; `false` if none waits any more (it gave up: its
    /// deadline passed or its task was cancelled; or it already has a reply), or if the address was made
    /// by a test.
    @discardableResult
    public func deliver() -> Bool {
        to.channel?.answer(value) ?? false
    }

    /// `reply to #id: value`.
    public var description: String { "reply to #\(to.id): \(value)" }
}

extension Reply: Equatable where Value: Equatable {
    /// Equal when they answer the same request with equal values.
    public static func == (lhs: Reply, rhs: Reply) -> Bool { lhs.to == rhs.to && lhs.value == rhs.value }
}

extension Reply: Hashable where Value: Hashable {
    /// Hashes the request's id and the value.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(to)
        hasher.combine(value)
    }
}

/// Where the runtime delivers the reply to one request. Implemented by `LoopRuntime`.
@usableFromInline
package protocol ReplyChannel<Value>: AnyObject, Sendable {
    /// The reply's type.
    associatedtype Value: Sendable
    /// Hands `value` to the waiting caller; `false` if none waits any more.
    func answer(_ value: Value) -> Bool
}

/// A `ReplyTo` encodes as its id alone: an event that carries one can be recorded by a durable loop.
/// A decoded `ReplyTo` has the same id and no way to a caller in this process, so replying to it
/// directly reaches nobody; a durable loop delivers replies by id, to whoever waits for that id then.
extension ReplyTo: Codable {
    /// Encodes the id.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(id)
    }

    /// A reply address with the decoded id and no caller.
    public init(from decoder: any Decoder) throws {
        self.init(id: try decoder.singleValueContainer().decode(UInt64.self))
    }
}

/// A `Reply` encodes as its address's id and its value: an effect that holds one can be recorded (a
/// durable loop's timers keep effects). A decoded reply's address reaches nobody in this process.
extension Reply: Codable where Value: Codable {
    private enum CodingKeys: String, CodingKey {
        case to, value
    }

    /// Encodes the address's id and the value.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(to, forKey: .to)
        try container.encode(value, forKey: .value)
    }

    /// A reply with the decoded address (which reaches nobody) and value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            to: try container.decode(ReplyTo<Value>.self, forKey: .to),
            value: try container.decode(Value.self, forKey: .value)
        )
    }
}
