/// How the runtime schedules one effect: its policy, its key, and its timeout; or a request to cancel
/// every effect with a key.
///
/// An effect's lifecycle is a value the update decides (see ``ManagedEffect``), so a test asserts it
/// like any other value:
///
/// ```swift
/// #expect(Effect.search("swift").lifecycle == .latest("search", timeout: .seconds(2)))
/// ```
public struct EffectLifecycle: Hashable, Sendable, CustomStringConvertible {
    /// What happens when an effect starts while others with the same key are in flight.
    public enum Policy: Hashable, Sendable {
        /// Start at once, whatever else runs.
        case concurrent
        /// Queue behind the effect with the same key that is running, one at a time, in order.
        case serial
        /// Cancel the effects with the same key, running or queued, and take their place.
        case latest
        /// Drop this effect if one with the same key is running or queued.
        case dropIfRunning
        /// Start nothing; cancel every effect with the key, running or queued.
        case cancel
    }

    /// The policy.
    public let policy: Policy
    /// The key the policy applies to; `nil` only for a concurrent effect without one.
    public let key: EffectKey?
    /// How long the effect may run before it is cancelled and reported as timed out.
    public let timeout: Duration?

    private init(policy: Policy, key: EffectKey?, timeout: Duration?) {
        self.policy = policy
        self.key = key
        self.timeout = timeout
    }

    /// Starts at once; a key lets ``cancel(_:)`` reach it. `.concurrent()`, with no key and no timeout,
    /// is the default for every effect.
    public static func concurrent(_ key: EffectKey? = nil, timeout: Duration? = nil) -> EffectLifecycle {
        EffectLifecycle(policy: .concurrent, key: key, timeout: timeout)
    }

    /// Runs one at a time per key, in the order the update asked for them.
    public static func serial(_ key: EffectKey, timeout: Duration? = nil) -> EffectLifecycle {
        EffectLifecycle(policy: .serial, key: key, timeout: timeout)
    }

    /// Cancels whatever runs or waits under `key` and takes its place.
    public static func latest(_ key: EffectKey, timeout: Duration? = nil) -> EffectLifecycle {
        EffectLifecycle(policy: .latest, key: key, timeout: timeout)
    }

    /// Is dropped while another effect with `key` runs or waits.
    public static func dropIfRunning(_ key: EffectKey, timeout: Duration? = nil) -> EffectLifecycle {
        EffectLifecycle(policy: .dropIfRunning, key: key, timeout: timeout)
    }

    /// Starts nothing, and cancels every effect with `key`, including those queued and not yet started.
    public static func cancel(_ key: EffectKey) -> EffectLifecycle {
        EffectLifecycle(policy: .cancel, key: key, timeout: nil)
    }

    /// The policy, key and timeout, as a factory call would read.
    public var description: String {
        let key = self.key.map { #""\#($0)""# } ?? ""
        let timeout = self.timeout.map { (key.isEmpty ? "" : ", ") + "timeout: \($0)" } ?? ""
        return ".\(policy)(\(key)\(timeout))"
    }
}
