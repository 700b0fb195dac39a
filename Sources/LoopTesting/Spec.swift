internal import LoopCore

/// The checking shared by every spec.
enum Spec {
    /// Runs each expectation on `outcome`, fails the running test at `site` when any fails, and returns what
    /// was found.
    static func check<State, Effect>(
        _ outcome: Next<State, Effect>,
        against expectations: [Then<State, Effect>],
        subject: String,
        site: SourceSite
    ) -> SpecResult {
        let result = SpecResult(subject: subject, differences: expectations.flatMap { $0.check(outcome) })
        if !result.passed { site.fail(result.description) }
        return result
    }
}
