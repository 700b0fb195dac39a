public import LoopCore
public import Synchronization

/// The ids of the runtime's requests, unique within the process.
@usableFromInline
let requestIdentifiers = Atomic<UInt64>(0)

/// A request the loop holds until it stops, so that it can fail it then.
@usableFromInline
package protocol PendingRequest: AnyObject, Sendable {
    /// Whether it has its outcome (a reply or an error).
    var isResolved: Bool { get }
    /// Fails it with `error`, unless it already has its outcome.
    func fail(_ error: RequestError)
}

/// One caller waiting for a reply. Its outcome is decided once, by whichever comes first: the reply,
/// the loop's stop, the deadline, the task's cancellation, a rejection, or the last copy of its
/// ``/LoopCore/ReplyTo`` going away; every later attempt changes nothing.
@usableFromInline
package final class RequestWaiter<Value: Sendable>: PendingRequest {
    @usableFromInline
    enum Phase {
        /// No continuation and no outcome yet.
        case pending
        /// The outcome, decided before the continuation came.
        case early(Result<Value, RequestError>)
        case waiting(CheckedContinuation<Result<Value, RequestError>, Never>)
        case resolved
    }

    // The phases that matter on the common path (`pending`, `waiting`) are told apart by their case
    // alone: a phase of `pending(Result?)` had its payload copied out to test it for nil on every
    // resolve, which for a large value was most of what resolving cost (`Docs/Performance.md`).
    @usableFromInline
    let phase = Locked(Phase.pending)
    /// Set once the outcome is decided, so a loop sweeping the requests it holds reads it without the lock.
    @usableFromInline
    let resolved = Atomic<Bool>(false)

    @inlinable
    package init() {}

    /// The continuation to resume with the outcome: at once if it is already known.
    @inlinable
    package func install(_ continuation: CheckedContinuation<Result<Value, RequestError>, Never>) {
        let known = phase.withLock { phase -> Result<Value, RequestError>? in
            switch phase {
            case .pending:
                phase = .waiting(continuation)
                return nil
            case .early(let result):
                phase = .resolved
                return result
            case .waiting, .resolved:
                return nil
            }
        }
        if let known { continuation.resume(returning: known) }
    }

    /// Decides the outcome; `false` if it had already been decided.
    @inlinable
    @discardableResult
    package func resolve(_ result: Result<Value, RequestError>) -> Bool {
        let (decided, waiter) = phase.withLock {
            phase -> (Bool, CheckedContinuation<Result<Value, RequestError>, Never>?) in
            switch phase {
            case .pending:
                phase = .early(result)
                resolved.store(true, ordering: .releasing)
                return (true, nil)
            case .waiting(let continuation):
                phase = .resolved
                resolved.store(true, ordering: .releasing)
                return (true, continuation)
            case .early, .resolved:
                return (false, nil)
            }
        }
        waiter?.resume(returning: result)
        return decided
    }

    @inlinable
    package var isResolved: Bool {
        resolved.load(ordering: .acquiring)
    }

    @inlinable
    package func fail(_ error: RequestError) {
        resolve(.failure(error))
    }
}

/// What a ``/LoopCore/ReplyTo`` made by the runtime holds: the way to its waiter. When the last copy
/// goes (the loop let go of the request without replying), the waiter fails with
/// ``RequestError/unanswered``; once it has its reply, that changes nothing.
@usableFromInline
final class RequestTicket<Value: Sendable>: ReplyChannel {
    @usableFromInline
    let waiter: RequestWaiter<Value>

    @inlinable
    init(_ waiter: RequestWaiter<Value>) {
        self.waiter = waiter
    }

    deinit {
        waiter.fail(.unanswered)
    }

    @usableFromInline
    func answer(_ value: Value) -> Bool {
        waiter.resolve(.success(value))
    }
}

/// The part of a request that is the same for a standalone loop and an entity of a group.
@usableFromInline
enum Requests {
    /// Makes the request's event with `make`, hands it to `send` with its waiter, and waits for the
    /// outcome: the reply, or the error that ended the wait. `send` delivers the event and has the loop
    /// that took it hold the waiter (``LoopEngine/register(_:)``); it returns the delivery.
    @inlinable
    static func ask<Event, Value: Sendable>(
        timeout: Duration?,
        clock: any Clock<Duration>,
        make: (ReplyTo<Value>) -> Event,
        send: (Event, RequestWaiter<Value>) -> Delivery
    ) async throws(RequestError) -> Value {
        if Task.isCancelled { throw .cancelled }
        let waiter = RequestWaiter<Value>()
        let timer = timeout.map { timeout in
            Task {
                do { try await clock.sleep(for: timeout) } catch { return }
                waiter.fail(.timedOut(after: timeout))
            }
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, RequestError>, Never>) in
                waiter.install(continuation)
                // Cancelled (or timed out) before it was sent: the caller has its error, so send nothing.
                guard !waiter.isResolved else { return }
                let id = requestIdentifiers.add(1, ordering: .relaxed).newValue
                let event = make(ReplyTo(id: id, channel: RequestTicket(waiter)))
                // The event (and the ticket in it) lives until the rejection is recorded, so a rejected
                // request fails as rejected, not as unanswered.
                withExtendedLifetime(event) {
                    if case .rejected(let rejection) = send(event, waiter) { waiter.fail(.rejected(rejection)) }
                }
            }
        } onCancel: {
            waiter.fail(.cancelled)
        }
        timer?.cancel()
        return try result.get()
    }
}
