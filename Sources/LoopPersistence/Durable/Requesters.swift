public import LoopCore
public import LoopRuntime
public import Synchronization

/// Callers waiting for replies from durable loops, by stream and reply address. Replies are delivered
/// by address, not through the `ReplyTo` the event carried, so an answer reaches whoever waits for it
/// now: every repeat of a key at once, and a caller that asked before the entity was passivated or
/// recovered.
@usableFromInline
package final class Requesters: Sendable {
    /// A caller waiting at a reply address: its ticket and the stream it asked.
    @usableFromInline
    struct Waiting {
        @usableFromInline var waiter: any AnswerWaiter
        @usableFromInline var ticket: UInt64
        @usableFromInline var stream: String

        @inlinable
        init(_ waiter: any AnswerWaiter, ticket: UInt64, stream: String) {
            self.waiter = waiter
            self.ticket = ticket
            self.stream = stream
        }
    }

    /// The callers at one reply address: almost always one, so one needs no array.
    enum Callers {
        case one(Waiting)
        case many([Waiting])

        var all: [Waiting] {
            switch self {
            case .one(let waiting): [waiting]
            case .many(let all): all
            }
        }

        /// These callers with `waiting` added.
        func adding(_ waiting: Waiting) -> Callers {
            .many(all + [waiting])
        }

        /// These callers without those `leaves` picks (`nil` when none is left), and those it picked.
        func removing(where leaves: (Waiting) -> Bool) -> (kept: Callers?, removed: [Waiting]) {
            if case .one(let waiting) = self { return leaves(waiting) ? (nil, [waiting]) : (self, []) }
            let all = self.all
            let kept = all.filter { !leaves($0) }
            return (kept.isEmpty ? nil : .many(kept), all.filter(leaves))
        }
    }

    /// Callers by reply address. An address is unique within the process for an unkeyed request and
    /// derived from the stream, key and event for a keyed one; each caller's stream is checked as well.
    private let waiting = Locked<[UInt64: Callers]>([:])
    /// Replies that found nobody waiting: the caller gave up or was answered already, or none asked.
    @usableFromInline let dropped = Atomic<Int>(0)
    /// The requests' deadlines.
    @usableFromInline let timer: RequestTimer

    @usableFromInline
    package init(clock: any Clock<Duration>) {
        timer = RequestTimer(clock: clock)
    }

    @usableFromInline
    func register(_ waiter: any AnswerWaiter, ticket: UInt64, reply: UInt64, in stream: String) {
        let waiting = Waiting(waiter, ticket: ticket, stream: stream)
        self.waiting.withLock { callers in
            callers[reply] = callers[reply]?.adding(waiting) ?? .one(waiting)
        }
    }

    @usableFromInline
    func remove(ticket: UInt64, reply: UInt64, in stream: String) {
        _ = take(reply) { $0.ticket == ticket }
    }

    /// Removes the callers at `reply` that `leaves` picks, and returns them.
    private func take(_ reply: UInt64, where leaves: (Waiting) -> Bool) -> [Waiting] {
        waiting.withLock { callers in
            guard let at = callers[reply] else { return [] }
            let (kept, removed) = at.removing(where: leaves)
            if !removed.isEmpty { callers[reply] = kept }
            return removed
        }
    }

    /// Hands `delivery` to every caller waiting for its address in `stream`.
    @usableFromInline
    package func deliver(_ delivery: ReplyDelivery, in stream: String) {
        let waiters = take(delivery.reply) { $0.stream == stream }
        var answered = false
        for waiting in waiters where waiting.waiter.resolve(delivery) { answered = true }
        if !answered { dropped.add(1, ordering: .relaxed) }
    }

    @usableFromInline
    package func refuse(_ ticket: UInt64, reply: UInt64, in stream: String, with error: RequestError) {
        for waiting in take(reply, where: { $0.ticket == ticket && $0.stream == stream }) { waiting.waiter.fail(error) }
    }

    /// Fails every caller waiting for a reply from `stream`.
    @usableFromInline
    func fail(_ stream: String, with error: RequestError) {
        let waiters = waiting.withLock { callers in
            var failed: [Waiting] = []
            for reply in Array(callers.keys) {
                guard let at = callers[reply] else { continue }
                let (kept, removed) = at.removing { $0.stream == stream }
                if !removed.isEmpty { callers[reply] = kept }
                failed += removed
            }
            return failed
        }
        for waiting in waiters { waiting.waiter.fail(error) }
    }

    @usableFromInline
    func failAll(with error: RequestError) {
        timer.stop()
        let waiters = waiting.withLock { callers in
            defer { callers = [:] }
            return callers.values.flatMap(\.all)
        }
        for waiting in waiters { waiting.waiter.fail(error) }
    }

    /// Sends a request with `deliver` and waits for its reply, or the error that ended the wait. The
    /// reply address is derived from the key for a keyed request (so every repeat waits on the same
    /// one, in every process), and unique within the process otherwise.
    @inlinable
    package func ask<Value: Sendable, Event>(
        stream: String,
        key: String?,
        timeout: Duration?,
        make: (ReplyTo<Value>) -> Event,
        fingerprint: (Event) throws -> UInt64,
        deliver: (DurableCall<Event>) -> Delivery,
        refusal: (Rejection) -> RequestError
    ) async throws(RequestError) -> Value {
        if Task.isCancelled { throw .cancelled }
        if let key, let problem = KeyLimits.problem(with: key) { throw .invalid(problem) }
        // A keyed request's address is derived from its stream, key and event, so the repeats of one
        // request share it (in any process) and another event under the key never receives its answer.
        // The event's digest is taken with a placeholder address, as the address depends on it.
        var reply = unkeyedReplies.add(1, ordering: .relaxed).newValue & ~(1 << 63)
        var digest: UInt64 = 0
        if let key {
            do {
                digest = try fingerprint(make(ReplyTo(id: 0)))
            } catch {
                throw .invalid("the event does not encode: \(error)")
            }
            reply = keyedReply(stream: stream, key: key, event: digest)
        }
        let event = make(ReplyTo(id: reply))
        let ticket = ticketNumbers.add(1, ordering: .relaxed).newValue
        let waiter = DeliveryWaiter()
        register(waiter, ticket: ticket, reply: reply, in: stream)
        defer { remove(ticket: ticket, reply: reply, in: stream) }
        let deadline = timeout.map { timer.add(waiter, timeout: $0) }
        defer { if let deadline { timer.remove(deadline) } }
        let call = DurableCall(event: event, key: key, fingerprint: digest, reply: reply, ticket: ticket)
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<ReplyDelivery, RequestError>, Never>) in
                waiter.waiter.install(continuation)
                // Cancelled (or timed out) before it was sent: the caller has its error, so send nothing.
                guard !waiter.waiter.isResolved else { return }
                if case .rejected(let rejection) = deliver(call) { waiter.waiter.fail(refusal(rejection)) }
            }
        } onCancel: {
            waiter.waiter.fail(.cancelled)
        }
        // The delivery becomes the caller's value here, in code specialized for `Value`, not in the
        // waiter, which resolves every request's delivery alike (`Docs/Performance.md`).
        switch try result.get().value {
        case .success(let value as Value):
            return value
        case .success(let value):
            throw .invalid("the program replies with \(type(of: value)), not the \(Value.self) this request expects")
        case .failure(let error):
            throw .storeFailed("the recorded answer does not decode: \(error)")
        }
    }
}

/// The reply addresses of unkeyed requests: unique within the process, below those derived from keys,
/// and starting at a random number, so they do not meet the addresses a previous process gave out (an
/// entity may keep one in its state, and answer it after a restart).
@usableFromInline
let unkeyedReplies = Atomic<UInt64>(UInt64.random(in: 0..<(1 << 62)))

/// The reply address of the request under `key` to `stream` whose event has the digest `event`: the same
/// in every process, with the top bit set so it never meets an unkeyed one.
@usableFromInline
package func keyedReply(stream: String, key: String, event: UInt64) -> UInt64 {
    fingerprint(key.utf8, seed: fingerprint(stream.utf8) ^ event ^ 0x9E37_79B9_7F4A_7C15) | (1 << 63)
}

/// The reply address and the event's digest of a keyed request to `stream` whose event, built around a
/// placeholder address, encodes as `placeholder`: what a caller in another process sends with its event
/// (see ``keyedReply(stream:key:event:)``).
package func requestAddress(stream: String, key: String, placeholder: [UInt8]) -> (reply: UInt64, digest: UInt64) {
    let digest = fingerprint(placeholder)
    return (keyedReply(stream: stream, key: key, event: digest), digest)
}

/// What a caller's key may be.
public enum KeyLimits {
    /// The longest key, in UTF-8 bytes: keys are recorded with their events and carried by snapshots.
    public static let maximumLength = 1_024

    /// Why `key` cannot be used, or `nil` if it can.
    public static func problem(with key: String) -> String? {
        if key.isEmpty { return "an empty key" }
        let length = key.utf8.count
        if length > maximumLength { return "a key of \(length) bytes, past the limit of \(maximumLength)" }
        return nil
    }
}

/// A caller waiting for a reply, whatever its type: a request's caller in this process, or code of this
/// package that passes the answer on (a cluster node answering a caller in another process).
@usableFromInline
package protocol AnswerWaiter: AnyObject, Sendable {
    /// Hands over `delivery`; `false` if the caller has its outcome already.
    func resolve(_ delivery: ReplyDelivery) -> Bool
    /// Ends the wait with `error`.
    func fail(_ error: RequestError)
}

/// A caller in this process waiting for a reply: the delivery is handed over as it is, and the caller's
/// own code (``Requesters/ask(stream:key:timeout:make:fingerprint:deliver:refusal:)``) makes it a value of
/// the type it expects. Not generic, so resolving it runs no unspecialized code: a waiter generic over
/// the value's type was resolved through this protocol, unspecialized, and copying its phase through
/// value witnesses was about 5% of w13.
@usableFromInline
final class DeliveryWaiter: AnswerWaiter {
    @usableFromInline let waiter = RequestWaiter<ReplyDelivery>()

    @inlinable
    init() {}

    @usableFromInline
    func resolve(_ delivery: ReplyDelivery) -> Bool {
        waiter.resolve(.success(delivery))
    }

    @usableFromInline
    func fail(_ error: RequestError) {
        waiter.fail(error)
    }
}
