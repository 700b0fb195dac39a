/// A first-in first-out queue with O(1) amortised append and removal at the front.
///
/// Two stacks: new elements go on `incoming`; the front is the end of `outgoing`, refilled by swapping in
/// `incoming` and reversing it in place when it runs out, so both buffers are reused.
@usableFromInline
struct Inbox<Element> {
    @usableFromInline
    var incoming: [Element] = []
    @usableFromInline
    var outgoing: [Element] = []

    @inlinable
    init() {}

    @usableFromInline
    var count: Int { incoming.count + outgoing.count }
    @usableFromInline
    var isEmpty: Bool { incoming.isEmpty && outgoing.isEmpty }

    @inlinable
    mutating func append(_ element: Element) {
        incoming.append(element)
    }

    @inlinable
    mutating func popFirst() -> Element? {
        if outgoing.isEmpty {
            guard !incoming.isEmpty else { return nil }
            swap(&incoming, &outgoing)
            outgoing.reverse()
        }
        return outgoing.popLast()
    }

    /// Empties the queue, returning its elements in order.
    @inlinable
    mutating func removeAll() -> [Element] {
        let all = outgoing.reversed() + incoming
        incoming = []
        outgoing = []
        return all
    }
}
