/// Receives everything a loop does, for logging, metrics and tracing.
///
/// `observe(_:)` is called synchronously, from whichever thread did the work (the thread that processed
/// an event, the task that ran an effect), possibly from several at once; it must be thread-safe and
/// quick. It is never called while the loop holds its lock, so it may call `send`, read `state`, or
/// stop the loop.
public protocol LoopObserver<Event, Effect>: Sendable {
    /// The loop's events.
    associatedtype Event: Sendable
    /// The loop's effects.
    associatedtype Effect: Sendable

    /// Called for each thing the loop did.
    func observe(_ activity: LoopActivity<Event, Effect>)
}

/// An observer made of a closure.
public struct ClosureLoopObserver<Event: Sendable, Effect: Sendable>: LoopObserver {
    private let body: @Sendable (LoopActivity<Event, Effect>) -> Void

    /// Creates an observer that passes each activity to `body`.
    public init(_ body: @escaping @Sendable (LoopActivity<Event, Effect>) -> Void) {
        self.body = body
    }

    /// Passes `activity` to the closure.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        body(activity)
    }
}
