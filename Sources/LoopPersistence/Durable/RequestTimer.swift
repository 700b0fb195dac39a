internal import LoopRuntime

/// The deadlines of a durable loop's or group's requests, kept by one sleeping task instead of a task
/// per request (which cost a third of w13's throughput: a task, a timer and a cancellation each).
///
/// Deadlines are kept in one queue per timeout: requests with the same timeout expire in the order they
/// were made, so each queue is in deadline order and the task sleeps until the earliest of the queues'
/// heads. A request that ends before its deadline leaves a stale entry, dropped when it comes up, or when
/// stale ones outnumber the live ones.
@usableFromInline
final class RequestTimer: Sendable {
    private struct Deadlines {
        var entries: [(deadline: Duration, id: UInt64)] = []
        var head = 0
    }

    private struct Waiting {
        var queues: [Duration: Deadlines] = [:]
        var live: [UInt64: (waiter: any AnswerWaiter, timeout: Duration)] = [:]
        var entries = 0
        /// The deadline the sleeping task wakes at, and the task.
        var sleeper: (until: Duration, task: Task<Void, Never>, id: UInt64)?
        var next: UInt64 = 0
        var sleepers: UInt64 = 0
        var stopped = false
    }

    /// The time since the timer was made, on its clock.
    private let elapsed: @Sendable () -> Duration
    /// Sleeps until that time is at least the given one (an instant, not a length, so a clock moved
    /// between reading it and sleeping wakes the sleeper on time).
    private let sleepUntil: @Sendable (Duration) async throws -> Void
    private let waiting = Locked(Waiting())

    @usableFromInline
    init(clock: any Clock<Duration>) {
        (elapsed, sleepUntil) = Self.stopwatch(clock)
    }

    private static func stopwatch<C: Clock<Duration>>(
        _ clock: C
    ) -> (@Sendable () -> Duration, @Sendable (Duration) async throws -> Void) {
        let origin = clock.now
        return (
            { origin.duration(to: clock.now) },
            { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
        )
    }

    /// Fails `waiter` with ``/LoopRuntime/RequestError/timedOut(after:)`` once `timeout` has passed, unless
    /// it is removed first; returns its id for ``remove(_:)``.
    @usableFromInline
    func add(_ waiter: any AnswerWaiter, timeout: Duration) -> UInt64 {
        let (id, stale) = waiting.withLock { waiting -> (UInt64, Task<Void, Never>?) in
            waiting.next += 1
            let id = waiting.next
            // Stopped: nothing waits any more (the request is refused), and no sleeper may start.
            guard !waiting.stopped else { return (id, nil) }
            // Read under the lock, so each queue stays in deadline order.
            let deadline = elapsed() + timeout
            waiting.live[id] = (waiter, timeout)
            waiting.queues[timeout, default: Deadlines()].entries.append((deadline, id))
            waiting.entries += 1
            guard let sleeper = waiting.sleeper, sleeper.until <= deadline else {
                let previous = waiting.sleeper?.task
                waiting.sleeper = sleep(until: deadline, &waiting)
                return (id, previous)
            }
            return (id, nil)
        }
        stale?.cancel()
        return id
    }

    /// Forgets the deadline of the request `id`: it has its outcome.
    @usableFromInline
    func remove(_ id: UInt64) {
        waiting.withLock { waiting in
            guard waiting.live.removeValue(forKey: id) != nil else { return }
            // Stale entries are dropped when they come up; past twice the live ones, all at once.
            guard waiting.entries > 2 * waiting.live.count + 1_024 else { return }
            let live = waiting.live
            for timeout in waiting.queues.keys {
                waiting.queues[timeout]?.entries.removeAll { live[$0.id] == nil }
                waiting.queues[timeout]?.head = 0
            }
            waiting.queues = waiting.queues.filter { !$0.value.entries.isEmpty }
            waiting.entries = waiting.queues.values.reduce(0) { $0 + $1.entries.count }
        }
    }

    /// A task that sleeps until `deadline` and then fails what is due; recorded as `waiting`'s sleeper by
    /// the caller.
    private func sleep(until deadline: Duration, _ waiting: inout Waiting) -> (Duration, Task<Void, Never>, UInt64) {
        let sleepUntil = self.sleepUntil
        waiting.sleepers += 1
        let id = waiting.sleepers
        let task = Task { [weak self] in
            do { try await sleepUntil(deadline) } catch { return }
            self?.expire(woken: id)
        }
        return (deadline, task, id)
    }

    /// Fails every request whose deadline has passed, and sleeps until the next one. `woken` is the
    /// sleeper that called it: one that `add` put in its place meanwhile is kept if it wakes in time.
    private func expire(woken: UInt64) {
        let now = elapsed()
        let (due, cancelled) = waiting.withLock { waiting -> ([(any AnswerWaiter, Duration)], Task<Void, Never>?) in
            var due: [(any AnswerWaiter, Duration)] = []
            var earliest: Duration?
            for timeout in Array(waiting.queues.keys) {
                guard var queue = waiting.queues[timeout] else { continue }
                while queue.head < queue.entries.count {
                    let entry = queue.entries[queue.head]
                    if let live = waiting.live[entry.id] {
                        guard entry.deadline <= now else {
                            earliest = min(earliest ?? entry.deadline, entry.deadline)
                            break
                        }
                        due.append(live)
                        waiting.live[entry.id] = nil
                    }
                    queue.head += 1
                    waiting.entries -= 1
                }
                if queue.head == queue.entries.count {
                    waiting.queues[timeout] = nil
                } else {
                    if queue.head > 1_024 && queue.head * 2 > queue.entries.count {
                        queue.entries.removeFirst(queue.head)
                        queue.head = 0
                    }
                    waiting.queues[timeout] = queue
                }
            }
            // Another sleeper, put in place while this one woke: kept if it wakes in time, else replaced.
            let other = waiting.sleeper.flatMap { $0.id == woken ? nil : $0 }
            if let other, earliest.map({ other.until <= $0 }) ?? true { return (due, nil) }
            waiting.sleeper = earliest.map { sleep(until: $0, &waiting) }
            return (due, other?.task)
        }
        cancelled?.cancel()
        for (waiter, timeout) in due { waiter.fail(.timedOut(after: timeout)) }
    }

    /// Stops the sleeping task: nothing waits any more.
    @usableFromInline
    func stop() {
        let task = waiting.withLock { waiting in
            defer { waiting = Waiting(next: waiting.next, sleepers: waiting.sleepers, stopped: true) }
            return waiting.sleeper?.task
        }
        task?.cancel()
    }
}
