/// A signal fired once; every wait for it returns then, or when the waiting task is cancelled.
final class OneShotSignal: Sendable {
    private struct Waiting {
        var fired = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let waiting = Locked(Waiting())

    /// Fires the signal, releasing every waiter, now and later.
    func fire() {
        let waiters = waiting.withLock { waiting in
            waiting.fired = true
            defer { waiting.waiters = [:] }
            return Array(waiting.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns when the signal fires or the current task is cancelled.
    func wait() async {
        let id = waiting.withLock { waiting in
            waiting.nextID &+= 1
            return waiting.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let parked = waiting.withLock { waiting in
                    guard !waiting.fired, !Task.isCancelled else { return false }
                    waiting.waiters[id] = continuation
                    return true
                }
                if !parked { continuation.resume() }
            }
        } onCancel: {
            waiting.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
