/// The runtime's one first-in first-out queue, with O(1) amortised append and removal at the front: a
/// loop's inbox, the effects waiting behind a busy effect key, a host's jobs, a durable group's live
/// entities in the order they came, a key window's keys.
///
/// Two stacks: new elements go on `incoming`; the front is the end of `outgoing`, refilled by swapping in
/// `incoming` and reversing it in place when it runs out, so under a steady load both buffers are reused.
/// An element taken leaves its slot at once, so what it holds is not kept until the queue next empties;
/// a queue that grew in a burst gives its large buffers back once it is empty.
@usableFromInline
package struct Queue<Element> {
    @usableFromInline
    var incoming: [Element] = []
    @usableFromInline
    var outgoing: [Element] = []

    /// An empty queue.
    @inlinable
    package init() {}

    /// How many elements it holds.
    @inlinable
    package var count: Int { incoming.count + outgoing.count }

    /// Whether it holds none.
    @inlinable
    package var isEmpty: Bool { incoming.isEmpty && outgoing.isEmpty }

    /// Its elements, first in first.
    @inlinable
    package var elements: [Element] { outgoing.reversed() + incoming }

    /// Adds `element` at the back.
    @inlinable
    package mutating func append(_ element: Element) {
        incoming.append(element)
    }

    /// Takes the element at the front, if any.
    @inlinable
    package mutating func popFirst() -> Element? {
        if outgoing.isEmpty {
            guard !incoming.isEmpty else { return nil }
            swap(&incoming, &outgoing)
            outgoing.reverse()
        }
        let first = outgoing.popLast()
        if outgoing.isEmpty && incoming.isEmpty { giveBackLargeBuffers() }
        return first
    }

    /// Empties the queue, returning its elements, first in first.
    @inlinable
    package mutating func removeAll() -> [Element] {
        let all = elements
        incoming = []
        outgoing = []
        return all
    }

    /// Gives back both buffers if the queue is empty. For a queue that may now idle for long: a new loop
    /// of a group, whose first event was queued while its creator started it, would otherwise keep that
    /// event's buffer for as long as it idles (64 bytes of w3's bytes per loop, `Docs/Performance.md`).
    /// Not done whenever a queue empties: a loop whose handler sends one event back while it processes
    /// (w2s) would then allocate a buffer every round trip.
    @inlinable
    package mutating func releaseBuffersIfEmpty() {
        guard isEmpty else { return }
        incoming = []
        outgoing = []
    }

    /// Once the queue is empty: drops a buffer a burst left large, keeps a small one for reuse.
    @inlinable
    mutating func giveBackLargeBuffers() {
        if outgoing.capacity > Self.keptCapacity { outgoing = [] }
        if incoming.capacity > Self.keptCapacity { incoming = [] }
    }

    /// The largest buffer an empty queue keeps: small ones are reused, larger ones are given back.
    @usableFromInline
    static var keptCapacity: Int { 16 }
}
