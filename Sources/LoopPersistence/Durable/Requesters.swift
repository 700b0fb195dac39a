public import LoopCore
public import LoopRuntime
public import Synchronization

/// Callers waiting for replies from durable loops, by stream and reply address. Replies are delivered
/// by address, not through the `ReplyTo` the event carried, so an answer reaches whoever waits for it
/// now: every repeat of a key at once, and a caller that asked before the entity was passivated or
/// recovered.
@usableFromInline
final class Requesters: Sendable {
    @usableFromInline
    struct Address: Hashable {
        @usableFromInline var stream: String
        @usableFromInline var reply: UInt64

        @inlinable
        init(stream: String, reply: UInt64) {
            self.stream = stream
            self.reply = reply
        }
    }

    private let waiting = Locked<[Address: [UInt64: any AnswerWaiter]]>([:])
    /// Replies that found nobody waiting: the caller gave up or was answered already, or none asked.
    @usableFromInline let dropped = Atomic<Int>(0)
    /// The requests' deadlines.
    @usableFromInline let timer: RequestTimer

    @usableFromInline
    init(clock: any Clock<Duration>) {
        timer = RequestTimer(clock: clock)
    }

    @usableFromInline
    func register(_ waiter: any AnswerWaiter, ticket: UInt64, reply: UInt64, in stream: String) {
        waiting.withLock { $0[Address(stream: stream, reply: reply), default: [:]][ticket] = waiter }
    }

    @usableFromInline
    func remove(ticket: UInt64, reply: UInt64, in stream: String) {
        let address = Address(stream: stream, reply: reply)
        waiting.withLock { waiting in
            waiting[address]?[ticket] = nil
            if waiting[address]?.isEmpty == true { waiting[address] = nil }
        }
    }

    /// Hands `delivery` to every caller waiting for its address in `stream`.
    @usableFromInline
    func deliver(_ delivery: ReplyDelivery, in stream: String) {
        let waiters = waiting.withLock { $0.removeValue(forKey: Address(stream: stream, reply: delivery.reply)) }
        var answered = false
        for waiter in waiters?.values ?? [:].values where waiter.settle(delivery.value) { answered = true }
        if !answered { dropped.add(1, ordering: .relaxed) }
    }

    @usableFromInline
    func refuse(_ ticket: UInt64, reply: UInt64, in stream: String, with error: RequestError) {
        let waiter = waiting.withLock { $0[Address(stream: stream, reply: reply)]?.removeValue(forKey: ticket) }
        waiter?.fail(error)
    }

    /// Fails every caller waiting for a reply from `stream`.
    @usableFromInline
    func fail(_ stream: String, with error: RequestError) {
        let waiters = waiting.withLock { waiting in
            let addresses = waiting.keys.filter { $0.stream == stream }
            return addresses.flatMap { waiting.removeValue(forKey: $0)?.values.map { $0 } ?? [] }
        }
        for waiter in waiters { waiter.fail(error) }
    }

    @usableFromInline
    func failAll(with error: RequestError) {
        timer.stop()
        let waiters = waiting.withLock { waiting in
            defer { waiting = [:] }
            return waiting.values.flatMap { $0.values }
        }
        for waiter in waiters { waiter.fail(error) }
    }

    /// Sends a request with `deliver` and waits for its reply, or the error that ended the wait. The
    /// reply address is derived from the key for a keyed request (so every repeat waits on the same
    /// one, in every process), and unique within the process otherwise.
    @inlinable
    func perform<Value: Sendable, Event>(
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
        let waiter = TypedAnswerWaiter<Value>()
        register(waiter, ticket: ticket, reply: reply, in: stream)
        defer { remove(ticket: ticket, reply: reply, in: stream) }
        let deadline = timeout.map { timer.add(waiter, timeout: $0) }
        defer { if let deadline { timer.remove(deadline) } }
        let call = DurableCall(event: event, key: key, fingerprint: digest, reply: reply, ticket: ticket)
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, RequestError>, Never>) in
                waiter.waiter.install(continuation)
                // Cancelled (or timed out) before it was sent: the caller has its error, so send nothing.
                guard !waiter.waiter.isSettled else { return }
                if case .rejected(let rejection) = deliver(call) { waiter.waiter.fail(refusal(rejection)) }
            }
        } onCancel: {
            waiter.waiter.fail(.cancelled)
        }
        return try result.get()
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
func keyedReply(stream: String, key: String, event: UInt64) -> UInt64 {
    fingerprint(key.utf8, seed: fingerprint(stream.utf8) ^ event ^ 0x9E37_79B9_7F4A_7C15) | (1 << 63)
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

/// A caller waiting for a reply, whatever its type.
@usableFromInline
protocol AnswerWaiter: AnyObject, Sendable {
    /// Hands over `value`; `false` if the caller has its outcome already.
    func settle(_ value: Result<any Sendable, CodecError>) -> Bool
    /// Ends the wait with `error`.
    func fail(_ error: RequestError)
}

/// A caller waiting for a reply of type `Value`.
@usableFromInline
final class TypedAnswerWaiter<Value: Sendable>: AnswerWaiter {
    @usableFromInline let waiter = RequestWaiter<Value>()

    @inlinable
    init() {}

    @usableFromInline
    func settle(_ value: Result<any Sendable, CodecError>) -> Bool {
        switch value {
        case .success(let value as Value):
            return waiter.settle(.success(value))
        case .success(let value):
            return waiter.settle(
                .failure(
                    .invalid("the program replies with \(type(of: value)), not the \(Value.self) this request expects")
                )
            )
        case .failure(let error):
            return waiter.settle(.failure(.storeFailed("the recorded answer does not decode: \(error)")))
        }
    }

    @usableFromInline
    func fail(_ error: RequestError) {
        waiter.fail(error)
    }
}
