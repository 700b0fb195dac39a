import LoopRuntime
import LoopTesting

/// Named gates a handler waits at until the test opens them; lets a test hold effects in flight.
final class Gates: Sendable {
    private struct Board {
        var open: Set<String> = []
        var waiting: [String: [CheckedContinuation<Void, any Error>]] = [:]
        var arrived: [String: Int] = [:]
    }

    private let board = Locked(Board())

    /// Waits until `name` is open; throws `CancellationError` if the task is cancelled first.
    func pass(_ name: String) async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let open = board.withLock { board -> Bool? in
                    board.arrived[name, default: 0] += 1
                    if board.open.contains(name) { return true }
                    if Task.isCancelled { return false }
                    board.waiting[name, default: []].append(continuation)
                    return nil
                }
                switch open {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            let waiting = board.withLock { $0.waiting.removeValue(forKey: name) ?? [] }
            for waiter in waiting { waiter.resume(throwing: CancellationError()) }
        }
    }

    /// Opens `name`: every handler waiting there, and every later one, passes.
    func open(_ name: String) {
        let waiting = board.withLock { board in
            board.open.insert(name)
            return board.waiting.removeValue(forKey: name) ?? []
        }
        for waiter in waiting { waiter.resume() }
    }

    /// How many handlers have arrived at `name`.
    func arrivals(_ name: String) -> Int {
        board.withLock { $0.arrived[name] ?? 0 }
    }
}
