/// Something that runs until it is stopped, stops gracefully when asked, and returns what it did: the
/// shape of a long-running part of a service.
///
/// ``Loop``, ``LoopGroup`` and ``LoopStore`` adopt it, and so do the durable loops and the cluster node
/// of the persistence modules. A service framework adapts any of them with one generic wrapper: for a
/// swift-service-lifecycle `Service`, its `run()` calls ``run()``, a graceful shutdown calls
/// ``stop(gracePeriod:)``, and a cancellation of the task running ``run()`` makes it return at once.
///
/// ```swift
/// func serve(_ part: some Runnable) async throws {
///     let report = try await part.run()
///     print("stopped:", report)
/// }
/// ```
public protocol Runnable: AnyObject, Sendable {
    /// Runs until stopped; returns what it did.
    ///
    /// Returns after ``stop(gracePeriod:)`` has finished a graceful shutdown (at the end of its grace
    /// period at the latest), or promptly when the task running it is cancelled; the report's
    /// ``LoopReport/ending`` says which.
    @discardableResult
    func run() async throws -> LoopReport

    /// Shuts down gracefully: no new work is taken, work under way gets until `gracePeriod` to finish,
    /// and then ``run()`` returns. Called again, it can only bring the deadline forward. Called before
    /// ``run()``, it stops for good.
    func stop(gracePeriod: Duration)
}

extension Loop: Runnable {}
extension LoopGroup: Runnable {}
extension LoopStore: Runnable {}

extension LoopReport {
    /// The counts of this report and `other` added together (the ending is kept from this one).
    @inlinable
    package func adding(_ other: LoopReport) -> LoopReport {
        var sum = self
        sum.eventsSent += other.eventsSent
        sum.eventsProcessed += other.eventsProcessed
        sum.eventsRejected += other.eventsRejected
        sum.eventsDropped += other.eventsDropped
        sum.effectsStarted += other.effectsStarted
        sum.effectsCompleted += other.effectsCompleted
        sum.effectsFailed += other.effectsFailed
        sum.effectsCancelled += other.effectsCancelled
        sum.effectsTimedOut += other.effectsTimedOut
        sum.effectsDropped += other.effectsDropped
        sum.effectsAbandoned += other.effectsAbandoned
        sum.timedOutStillRunning += other.timedOutStillRunning
        sum.effectsCancelledAfterStart += other.effectsCancelledAfterStart
        sum.sendersWaiting += other.sendersWaiting
        return sum
    }
}
