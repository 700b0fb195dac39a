/// The queue in front of a store's one writer (group commit): writes that arrive while the writer is
/// busy wait, and the writer then takes them together, so a batch costs one sync however many loops
/// wrote to it. The file store and the Postgres store both keep one, under their own lock, beside the
/// state they check before queueing (closed, broken) and the work a batch does, which are theirs.
///
/// A value, so each rule is tested as one (`GroupCommitTests`): the first write queued while no writer
/// runs schedules one; a writer takes batch after batch until the queue is empty, and then ends; the next
/// write schedules a new one. At most one writer is scheduled or running at a time.
package struct GroupCommit<Write> {
    private var waiting: [Write] = []
    /// Whether a writer is scheduled or running.
    package private(set) var writing = false

    /// An empty queue, with no writer.
    package init() {}

    /// The writes waiting for the writer.
    package var count: Int { waiting.count }

    /// Queues `write`; `true` when the caller is to schedule the writer (none was scheduled or running).
    package mutating func enqueue(_ write: Write) -> Bool {
        waiting.append(write)
        guard !writing else { return false }
        writing = true
        return true
    }

    /// The writer's next batch: the oldest writes waiting, at most `limit` of them (at least one). `nil`
    /// when none waits: the writer ends, and the next write schedules a new one.
    package mutating func nextBatch(limit: Int = .max) -> [Write]? {
        let limit = max(limit, 1)
        guard !waiting.isEmpty else {
            writing = false
            return nil
        }
        guard waiting.count > limit else {
            defer { waiting = [] }
            return waiting
        }
        defer { waiting.removeFirst(limit) }
        return Array(waiting.prefix(limit))
    }

    /// Takes out every write waiting, for the caller to fail (the store closed, or can no longer be
    /// written). A writer that runs still ends at its next ``nextBatch(limit:)``.
    package mutating func removeAll() -> [Write] {
        defer { waiting = [] }
        return waiting
    }
}
