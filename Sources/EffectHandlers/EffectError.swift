/// An effect that could not be performed, for a reason the runtime found rather than the handler.
///
/// These errors reach the router's error mapping and the loop's observer like errors thrown by a
/// handler.
public struct EffectError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case unrouted
        case timedOut(Duration)
    }

    private let code: Code

    /// No route of the router accepts the effect.
    public static let unrouted = EffectError(code: .unrouted)

    /// The effect ran longer than its lifecycle's timeout and was cancelled.
    public static func timedOut(after timeout: Duration) -> EffectError {
        EffectError(code: .timedOut(timeout))
    }

    /// Whether the effect timed out.
    public var isTimeout: Bool {
        if case .timedOut = code { true } else { false }
    }

    /// A sentence saying what happened.
    public var description: String {
        switch code {
        case .unrouted: "no route handles this effect"
        case .timedOut(let timeout): "the effect timed out after \(timeout)"
        }
    }
}
