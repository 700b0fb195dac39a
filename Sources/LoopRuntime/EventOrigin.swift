/// Where an event a loop processed came from.
public enum EventOrigin: Hashable, Sendable, CustomStringConvertible {
    /// Sent from outside the loop: ``Loop/send(_:)``, ``LoopGroup/send(_:to:)``, or an async sender.
    case outside
    /// Sent by one of the loop's effect handlers, or made by the router from an effect's error or
    /// timeout.
    case effect
    /// Sent by one of the loop's event sources.
    case source

    /// `outside`, `effect` or `source`.
    public var description: String {
        switch self {
        case .outside: "outside"
        case .effect: "effect"
        case .source: "source"
        }
    }
}
