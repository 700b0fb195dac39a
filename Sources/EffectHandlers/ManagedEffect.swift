/// An effect that says how the runtime schedules it.
///
/// Conform your effect enum and derive each case's lifecycle from its values; the update then decides
/// the lifecycle simply by choosing the effect, and a test can assert both:
///
/// ```swift
/// enum Effect: ManagedEffect, Equatable {
///     case search(String)
///     case cancelSearch
///     case run(Job)
///
///     var lifecycle: EffectLifecycle {
///         switch self {
///         case .search: .latest("search", timeout: .seconds(2))
///         case .cancelSearch: .cancel("search")
///         case .run(let job): .serial("job-\(job.id)", timeout: job.timeout)
///         }
///     }
/// }
/// ```
///
/// An effect type that does not conform runs every effect ``EffectLifecycle/concurrent(_:timeout:)``.
public protocol ManagedEffect: Sendable {
    /// How the runtime schedules this effect.
    var lifecycle: EffectLifecycle { get }
}
