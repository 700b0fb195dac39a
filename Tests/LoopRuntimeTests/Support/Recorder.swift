import EffectHandlers
import LoopCore
import LoopRuntime
import Testing

/// What a loop did, as comparable values.
enum Happened<Event: Equatable & Sendable, Effect: Equatable & Sendable>: Equatable, Sendable {
    case processed(Event)
    case rejected(Event, Rejection)
    case eventDropped(Event)
    case started(Effect)
    case completed(Effect)
    case failed(Effect, String, mappedTo: Event?)
    case cancelled(Effect)
    case timedOut(Effect, mappedTo: Event?)
    case effectDropped(Effect)
    case sourceFailed(String)
    case sourceFinished
    case stopping
    case stopped

    init(_ activity: LoopActivity<Event, Effect>) {
        switch activity {
        case .eventProcessed(let event, _, _): self = .processed(event)
        case .eventRejected(let event, let reason): self = .rejected(event, reason)
        case .eventDropped(let event): self = .eventDropped(event)
        case .effectStarted(let effect, _): self = .started(effect)
        case .effectCompleted(let effect): self = .completed(effect)
        case .effectFailed(let effect, let error, let mapped): self = .failed(effect, "\(error)", mappedTo: mapped)
        case .effectCancelled(let effect): self = .cancelled(effect)
        case .effectTimedOut(let effect, _, let mapped): self = .timedOut(effect, mappedTo: mapped)
        case .effectDropped(let effect): self = .effectDropped(effect)
        case .sourceFailed(let error): self = .sourceFailed("\(error)")
        case .sourceFinished: self = .sourceFinished
        case .stopping: self = .stopping
        case .stopped: self = .stopped
        }
    }
}

/// An observer that records everything a loop does and lets a test wait for a condition on it.
final class Recorder<Event: Equatable & Sendable, Effect: Equatable & Sendable>: LoopObserver, Sendable {
    typealias Entry = Happened<Event, Effect>

    private struct Log {
        var entries: [Entry] = []
        var waiters: [(condition: @Sendable ([Entry]) -> Bool, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    private let log = Locked(Log())

    func observe(_ activity: LoopActivity<Event, Effect>) {
        let entry = Entry(activity)
        let ready = log.withLock { log in
            log.entries.append(entry)
            let entries = log.entries
            let ready = log.waiters.filter { $0.condition(entries) }.map(\.continuation)
            log.waiters.removeAll { $0.condition(entries) }
            return ready
        }
        for waiter in ready { waiter.resume(returning: true) }
    }

    var entries: [Entry] { log.withLock { $0.entries } }

    /// Waits until `condition` holds for the entries so far. Fails the test (instead of hanging) if it
    /// does not hold within a generous safety limit; the limit never decides a passing test.
    func wait(
        for description: String,
        sourceLocation: SourceLocation = #_sourceLocation,
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
                try? await Task.sleep(for: .seconds(300))
                return false
            }
            let first = await group.next() ?? false
            if !first { self.releaseWaiters() }
            group.cancelAll()
            return first
        }
        if !met { Issue.record("timed out waiting for \(description); saw \(entries)", sourceLocation: sourceLocation) }
    }

    /// Waits until `entry` has been recorded `count` times.
    func wait(for entry: Entry, count: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) async {
        await wait(for: "\(count) × \(entry)", sourceLocation: sourceLocation) { entries in
            entries.count { $0 == entry } >= count
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
