/// Names one performance of an effect so that a handler can make it idempotent: a durable loop's effects
/// run at least once (after a crash or a failover they can run again), always under the same key.
///
/// A durable loop gives each effect of a recorded event the key of the event's stream and version and
/// the effect's position among the event's effects; effects its program's `resume` asks for after a
/// recovery get the recovered version, marked `resumed`. The handler reads it while it runs:
///
/// ```swift
/// func handle(_ charge: Charge, send: Send<Event>) async throws {
///     let key = IdempotencyKey.current?.description ?? UUID().uuidString
///     try await payments.charge(charge, idempotencyKey: key)   // the provider drops a repeat
/// }
/// ```
///
/// `nil` outside a durable loop's effects.
public struct IdempotencyKey: Hashable, Sendable, CustomStringConvertible {
    /// The entity's stream.
    public var stream: String
    /// The version of the event that asked for the effect (for a resumed effect: the version recovered).
    public var version: UInt64
    /// The effect's position among those the event (or the resume) asked for.
    public var index: Int
    /// Whether the program's `resume` asked for it after a recovery.
    public var resumed: Bool

    /// Creates a key.
    public init(stream: String, version: UInt64, index: Int, resumed: Bool = false) {
        self.stream = stream
        self.version = version
        self.index = index
        self.resumed = resumed
    }

    /// `stream@version#index` (`stream@version~resume#index` for a resumed effect).
    public var description: String {
        "\(stream)@\(version)\(resumed ? "~resume" : "")#\(index)"
    }

    /// The key of the effect the current task performs, if a durable loop gave it one.
    @TaskLocal public static var current: IdempotencyKey?
}
