public import LoopCore
public import LoopRuntime

/// What a loop did, as a comparable value: a ``/LoopRuntime/LoopActivity`` without its durations,
/// errors rendered as text, so a test asserts a whole log with one `#expect`.
public enum RecordedActivity<Event: Equatable & Sendable, Effect: Equatable & Sendable>: Equatable, Sendable {
    /// The update processed the event.
    case processed(Event)
    /// The event was turned away.
    case rejected(Event, Rejection)
    /// The event was taken but dropped unprocessed.
    case eventDropped(Event)
    /// The effect's handler began.
    case started(Effect)
    /// The effect's handler returned.
    case completed(Effect)
    /// The effect failed with the error described; `mappedTo` is the event the router made of it.
    case failed(Effect, String, mappedTo: Event?)
    /// The effect was cancelled, before or after it began.
    case cancelled(Effect)
    /// The effect timed out; `mappedTo` is the event the router made of it.
    case timedOut(Effect, mappedTo: Event?)
    /// The effect was still running when the loop stopped without waiting.
    case abandoned(Effect)
    /// The effect was dropped by a `dropIfRunning` lifecycle.
    case effectDropped(Effect)
    /// An event source failed with the error described.
    case sourceFailed(String)
    /// An event source was exhausted.
    case sourceFinished
    /// Graceful shutdown began.
    case stopping
    /// The loop stopped.
    case stopped

    /// The value recording `activity`.
    public init(_ activity: LoopActivity<Event, Effect>) {
        switch activity {
        case .eventProcessed(let event, _, _, _, _, _): self = .processed(event)
        case .eventRejected(let event, let reason): self = .rejected(event, reason)
        case .eventDropped(let event): self = .eventDropped(event)
        case .effectStarted(let effect, _, _): self = .started(effect)
        case .effectCompleted(let effect, _, _): self = .completed(effect)
        case .effectFailed(let effect, _, let error, let mapped, _):
            self = .failed(effect, "\(error)", mappedTo: mapped)
        case .effectCancelled(let effect, _): self = .cancelled(effect)
        case .effectTimedOut(let effect, _, _, let mapped): self = .timedOut(effect, mappedTo: mapped)
        case .effectAbandoned(let effect, _): self = .abandoned(effect)
        case .effectDropped(let effect, _): self = .effectDropped(effect)
        case .sourceFailed(let error): self = .sourceFailed("\(error)")
        case .sourceFinished: self = .sourceFinished
        case .stopping: self = .stopping
        case .stopped: self = .stopped
        }
    }
}

/// An observer that records everything a loop (or a group's loops) does, and lets a test wait for a
/// condition on what it recorded.
///
/// ```swift
/// let recorder = RecordingObserver<Event, Effect>()
/// let loop = Loop(program: program, effects: router, observer: recorder)
/// loop.send(.start)
/// await recorder.wait(for: .completed(.fetch))
/// #expect(recorder.entries.first == .processed(.start))
/// ```
public final class RecordingObserver<Event: Equatable & Sendable, Effect: Equatable & Sendable>: LoopObserver,
    Sendable
{
    /// One recorded activity.
    public typealias Entry = RecordedActivity<Event, Effect>

    private struct Log {
        var entries: [Entry] = []
        var origins: [EventOrigin] = []
        var waiters: [(condition: @Sendable ([Entry]) -> Bool, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    private let log = Locked(Log())

    /// Creates an observer with nothing recorded.
    public init() {}

    /// Records `activity`, waking the waits it satisfies.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        let entry = Entry(activity)
        let ready = log.withLock { log in
            log.entries.append(entry)
            if case .eventProcessed(_, let origin, _, _, _, _) = activity { log.origins.append(origin) }
            let entries = log.entries
            let ready = log.waiters.filter { $0.condition(entries) }.map(\.continuation)
            log.waiters.removeAll { $0.condition(entries) }
            return ready
        }
        for waiter in ready { waiter.resume(returning: true) }
    }

    /// Everything recorded so far, in the order it was observed.
    public var entries: [Entry] { log.withLock { $0.entries } }

    /// Where each processed event came from, in processing order.
    public var origins: [EventOrigin] { log.withLock { $0.origins } }

    /// Waits until `condition` holds for the entries so far.
    ///
    /// Fails the running test (Swift Testing or XCTest) instead of hanging if the condition does not hold
    /// within `limit` of wall-clock time, a generous safety net that never decides a passing test.
    public func wait(
        for description: String,
        limit: Duration = .seconds(300),
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column,
        until condition: @escaping @Sendable ([Entry]) -> Bool
    ) async {
        let met = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let now = self.log.withLock { log in
                        if condition(log.entries) { return true }
                        log.waiters.append((condition, continuation))
                        return false
                    }
                    if now { continuation.resume(returning: true) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return false
            }
            let first = await group.next() ?? false
            if !first { self.releaseWaiters() }
            group.cancelAll()
            return first
        }
        if !met {
            SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
                .fail("timed out waiting for \(description); saw \(entries)")
        }
    }

    /// Waits until `entry` has been recorded `count` times.
    public func wait(
        for entry: Entry,
        count: Int = 1,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async {
        await wait(for: "\(count) × \(entry)", fileID: fileID, filePath: filePath, line: line, column: column) {
            entries in entries.count { $0 == entry } >= count
        }
    }

    private func releaseWaiters() {
        let waiters = log.withLock { log in
            defer { log.waiters = [] }
            return log.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume(returning: false) }
    }
}
