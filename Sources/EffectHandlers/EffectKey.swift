/// Names a group of effects for their lifecycle: effects with the same key can be queued behind each
/// other, replace each other, or be cancelled together.
///
/// ```swift
/// EffectLifecycle.latest("search")
/// EffectLifecycle.serial("job-\(job.id)")
/// ```
public struct EffectKey: Hashable, Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The key's name.
    public let name: String

    /// Creates a key named `name`.
    public init(_ name: String) {
        self.name = name
    }

    /// Creates a key from a string literal.
    public init(stringLiteral name: String) {
        self.name = name
    }

    /// The key's name.
    public var description: String { name }
}
