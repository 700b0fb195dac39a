/// How the runtime schedules one effect: its policy, its key, its timeout, and when it may start (after
/// a delay, a quiet period, or once per interval); or a request to cancel every effect with a key.
///
/// Time is measured on the loop's injected clock, so a test drives delays, debounces and throttles with
/// a manual clock. Lifecycles schedule effects performed by an asynchronous ``EffectHandler``; a
/// ``SyncEffectHandler`` runs its effect inline, at once.
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
        /// Start at most one per ``EffectLifecycle/interval``: the first at once; one asked for within
        /// the interval is dropped, or, when the lifecycle keeps the latest, waits (replacing any earlier
        /// one waiting) and starts when the interval ends, which opens the next one.
        case throttle
    }

    /// The policy.
    public let policy: Policy
    /// The key the policy applies to; `nil` only for a concurrent effect without one.
    public let key: EffectKey?
    /// How long the effect may run before it is cancelled and reported as timed out.
    public let timeout: Duration?
    /// How long after it is let in the effect starts; until then it can be cancelled by its key (and a
    /// newer `latest` one with its key replaces it: a debounce). `nil`: at once.
    public let delay: Duration?
    /// A throttle's interval: at most one effect with the key starts per interval.
    public let interval: Duration?
    /// Whether a throttle keeps the latest effect asked for within an interval, to start it when the
    /// interval ends (`true`), or drops it (`false`).
    public let keepsLatest: Bool

    private init(
        policy: Policy,
        key: EffectKey?,
        timeout: Duration?,
        delay: Duration? = nil,
        interval: Duration? = nil,
        keepsLatest: Bool = false
    ) {
        self.policy = policy
        self.key = key
        self.timeout = timeout
        self.delay = delay
        self.interval = interval
        self.keepsLatest = keepsLatest
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

    /// Starts `delay` after it is let in (on the loop's clock), concurrently with everything else. Until
    /// then a `cancel` of its `key` cancels it; a graceful stop cancels it too, since it has not started.
    ///
    /// ```swift
    /// case .retryAfter(let job, let delay): .delayed(by: delay, key: "retry-\(job)")
    /// ```
    public static func delayed(
        by delay: Duration,
        key: EffectKey? = nil,
        timeout: Duration? = nil
    )
        -> EffectLifecycle
    {
        EffectLifecycle(policy: .concurrent, key: key, timeout: timeout, delay: delay)
    }

    /// Starts once `quiet` has passed without another effect with `key` being asked for: each new one
    /// cancels those waiting or running under `key` and waits `quiet` again. A burst of searches typed
    /// within `quiet` of each other starts one search, for the last.
    public static func debounce(_ key: EffectKey, for quiet: Duration, timeout: Duration? = nil) -> EffectLifecycle {
        EffectLifecycle(policy: .latest, key: key, timeout: timeout, delay: quiet)
    }

    /// Starts at most one effect with `key` per `interval`: the first at once, and one asked for within
    /// the interval either waits for its end (`latest: true`, the default; a newer one replaces it, and
    /// the one replaced is reported dropped) or is dropped (`latest: false`).
    public static func throttle(
        _ key: EffectKey,
        every interval: Duration,
        latest: Bool = true,
        timeout: Duration? = nil
    ) -> EffectLifecycle {
        EffectLifecycle(policy: .throttle, key: key, timeout: timeout, interval: interval, keepsLatest: latest)
    }

    /// The lifecycle as a factory call would read.
    public var description: String {
        let key = self.key.map { #""\#($0)""# } ?? ""
        var arguments: [String] = key.isEmpty ? [] : [key]
        switch policy {
        case .throttle:
            if let interval { arguments.append("every: \(interval)") }
            if !keepsLatest { arguments.append("latest: false") }
        case .latest where delay != nil:
            return ".debounce(\(key), for: \(delay.map { "\($0)" } ?? ""))"
                + (timeout.map { ", timeout: \($0)" } ?? "")
        case .concurrent where delay != nil:
            arguments.insert("by: \(delay.map { "\($0)" } ?? "")", at: 0)
            if !key.isEmpty { arguments[1] = "key: " + key }
            return ".delayed(\(arguments.joined(separator: ", "))\(timeout.map { ", timeout: \($0)" } ?? ""))"
        default:
            break
        }
        if let timeout { arguments.append("timeout: \(timeout)") }
        return ".\(policy)(\(arguments.joined(separator: ", ")))"
    }
}
