internal import LoopRuntime

/// A shell that runs at most `limit` commands at once for everything that shares it; the others wait
/// their turn, in order. A cluster node runs each job as an entity of its own, so the runner's limit
/// (per entity) does not bound the node's processes: this does.
///
/// A run cancelled while it waits for its turn starts nothing and throws `CancellationError`, as a
/// cancelled command does.
public struct BoundedShell: Shell {
    private let shell: any Shell
    private let slots: Slots

    /// At most `limit` (at least 1) commands of `shell` at once.
    public init(_ shell: any Shell, limit: Int) {
        self.shell = shell
        slots = Slots(limit: max(1, limit))
    }

    /// How many commands run now, and how many wait for their turn.
    public var usage: (running: Int, waiting: Int) {
        slots.usage
    }

    /// Runs `command` once fewer than `limit` others run.
    public func run(_ command: String) async throws -> (status: Int32, output: String, errors: String) {
        try await slots.acquire()
        defer { slots.release() }
        return try await shell.run(command)
    }
}

/// Permits handed out in the order they were asked for; a waiter that is cancelled leaves the queue.
final class Slots: Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct Counts {
        var free: Int
        var waiting: [Waiter] = []
        var nextID: UInt64 = 0
        var running = 0
    }

    private let counts: Locked<Counts>

    init(limit: Int) {
        counts = Locked(Counts(free: limit))
    }

    var usage: (running: Int, waiting: Int) {
        counts.withLock { ($0.running, $0.waiting.count) }
    }

    /// Returns with a permit, or throws `CancellationError` (holding none) if the task is cancelled first.
    func acquire() async throws {
        let id = counts.withLock { counts in
            counts.nextID &+= 1
            return counts.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let granted = counts.withLock { counts -> Bool? in
                    if Task.isCancelled { return nil }
                    guard counts.free > 0, counts.waiting.isEmpty else {
                        counts.waiting.append(Waiter(id: id, continuation: continuation))
                        return false
                    }
                    counts.free -= 1
                    counts.running += 1
                    return true
                }
                switch granted {
                case true?: continuation.resume()
                case false?: break
                case nil: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let waiter = counts.withLock { counts -> Waiter? in
                guard let index = counts.waiting.firstIndex(where: { $0.id == id }) else { return nil }
                return counts.waiting.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Gives a permit back: to the first waiter, if any.
    func release() {
        let next = counts.withLock { counts -> Waiter? in
            guard !counts.waiting.isEmpty else {
                counts.free += 1
                counts.running -= 1
                return nil
            }
            // The permit passes on: the count of running commands stays.
            return counts.waiting.removeFirst()
        }
        next?.continuation.resume()
    }
}
