public import EffectHandlers
public import LoopCore
internal import LoopRuntime

/// The store's side of a durable loop: reading a stream back and appending to it, with the codecs.
/// Every failure comes back as a ``DurableInput/failed(_:)`` naming the stream (and the version, for an
/// event that does not decode), never as a thrown error the loop would have to map.
@usableFromInline
struct DurableStorage<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    @usableFromInline let store: any EventStore
    @usableFromInline let events: any EventCodec<Event>
    @usableFromInline let states: any EventCodec<State>
    @usableFromInline let initial: State
    @usableFromInline let update: Update<State, Event, Effect>

    @inlinable
    init(
        store: any EventStore,
        events: any EventCodec<Event>,
        states: any EventCodec<State>,
        initial: State,
        update: Update<State, Event, Effect>
    ) {
        self.store = store
        self.events = events
        self.states = states
        self.initial = initial
        self.update = update
    }

    /// The latest snapshot, then every later event folded through the update, one page in memory.
    @inlinable
    func recover(_ stream: String) async -> DurableInput<State, Event> {
        var state = initial
        var version: UInt64 = 0
        var snapshotVersion: UInt64 = 0
        do {
            if let snapshot = try await store.latestSnapshot(of: stream) {
                do {
                    state = try states.decode(snapshot.payload)
                } catch {
                    return .failed(
                        "stream '\(stream)': the snapshot at version \(snapshot.version) does not decode: \(error)"
                    )
                }
                version = snapshot.version
                snapshotVersion = snapshot.version
            }
            for try await stored in store.events(of: stream, after: version) {
                let event: Event
                do {
                    event = try events.decode(stored.payload)
                } catch {
                    return .failed(
                        "stream '\(stream)': the event at version \(stored.version) does not decode: \(error)"
                    )
                }
                _ = update(&state, event)
                version = stored.version
            }
        } catch {
            return .failed("cannot recover stream '\(stream)': \(error)")
        }
        return .recovered(state, version: version, snapshot: snapshotVersion)
    }

    /// Appends the events, then saves the snapshot if one came with them.
    @inlinable
    func append(
        _ batch: [Event],
        to stream: String,
        expecting: UInt64,
        snapshot: State?
    ) async -> [DurableInput<State, Event>] {
        let payloads: [[UInt8]]
        do {
            payloads = try batch.map(events.encode)
        } catch {
            return [.failed("stream '\(stream)': cannot encode an event: \(error)")]
        }
        let version: UInt64
        do {
            version = try await store.append(payloads, to: stream, expecting: expecting)
        } catch {
            return [.failed("\(error)")]
        }
        guard let snapshot else { return [.recorded(upTo: version)] }
        do {
            try await store.save(Snapshot(stream: stream, version: version, payload: try states.encode(snapshot)))
            return [.recorded(upTo: version)]
        } catch {
            // The events are durable: the loop goes on, and tries again after the next interval.
            return [
                .recorded(upTo: version),
                .snapshotFailed("stream '\(stream)': cannot save the snapshot at version \(version): \(error)"),
            ]
        }
    }

    /// The program's routes, wrapped: the program's effects keep their routes and lifecycles, the
    /// store's work runs in tasks, and senders waiting for durability are answered through `tickets`.
    @inlinable
    func router(
        for effects: EffectRouter<Effect, Event>,
        tickets: Tickets,
        failureGrace: Duration,
        recovered: @escaping @Sendable () -> Void = {},
        failed: @escaping @Sendable (_ stream: String, _ reason: String) -> Void = { _, _ in }
    ) -> EffectRouter<DurableEffect<State, Event, Effect>, DurableInput<State, Event>> {
        let storage = self
        return effects.mapEvents { DurableInput.event($0, ticket: nil) }
            .pullback(
                { (effect: DurableEffect<State, Event, Effect>) in
                    if case .effect(let inner, _) = effect { inner } else { nil }
                },
                key: { effect in if case .effect(_, let key) = effect { key } else { nil } }
            )
            .route(
                { if case .recover(let stream) = $0 { stream } else { nil } },
                to: ClosureEffectHandler { stream, send in
                    let input = await storage.recover(stream)
                    if case .recovered = input { recovered() }
                    send(input)
                }
            )
            .route(
                { effect -> (String, [Event], UInt64, State?)? in
                    guard case .append(let stream, let events, let expecting, let snapshot) = effect else { return nil }
                    return (stream, events, expecting, snapshot)
                },
                to: ClosureEffectHandler { append, send in
                    for input in await storage.append(append.1, to: append.0, expecting: append.2, snapshot: append.3) {
                        send(input)
                    }
                }
            )
            .route(
                { if case .acknowledge(let acknowledgements) = $0 { acknowledgements } else { nil } },
                to: ClosureSyncEffectHandler { acknowledgements, _ in tickets.acknowledge(acknowledgements) }
            )
            .route(
                { effect -> (stream: String, tickets: [UInt64], reason: String)? in
                    if case .fail(let stream, let tickets, let reason) = effect {
                        (stream, tickets, reason)
                    } else {
                        nil
                    }
                },
                to: ClosureSyncEffectHandler { failure, _ in
                    failed(failure.stream, failure.reason)
                    tickets.refuse(failure.tickets, with: DurableLoopError.storeFailed(failure.reason))
                }
            )
            .stopLoop { if case .stop = $0 { failureGrace } else { nil } }
    }
}

/// Senders waiting for their events to be durable, by ticket.
@usableFromInline
final class Tickets: Sendable {
    private struct Waiting {
        var next: UInt64 = 0
        var continuations: [UInt64: CheckedContinuation<UInt64, any Error>] = [:]
    }

    private let waiting = Locked(Waiting())

    @usableFromInline
    init() {}

    /// Registers `continuation`; returns its ticket.
    @usableFromInline
    func register(_ continuation: CheckedContinuation<UInt64, any Error>) -> UInt64 {
        waiting.withLock { waiting in
            waiting.next += 1
            waiting.continuations[waiting.next] = continuation
            return waiting.next
        }
    }

    @usableFromInline
    func acknowledge(_ acknowledgements: [Acknowledgement]) {
        let resumed = waiting.withLock { waiting in
            acknowledgements.compactMap { acknowledgement in
                waiting.continuations.removeValue(forKey: acknowledgement.ticket).map { ($0, acknowledgement.version) }
            }
        }
        for (continuation, version) in resumed { continuation.resume(returning: version) }
    }

    @usableFromInline
    func refuse(_ tickets: [UInt64], with error: any Error) {
        let refused = waiting.withLock { waiting in tickets.compactMap { waiting.continuations.removeValue(forKey: $0) }
        }
        for continuation in refused { continuation.resume(throwing: error) }
    }

    /// Fails every sender still waiting: the loop has ended.
    @usableFromInline
    func refuseAll(with error: any Error) {
        let refused = waiting.withLock { waiting in
            defer { waiting.continuations = [:] }
            return Array(waiting.continuations.values)
        }
        for continuation in refused { continuation.resume(throwing: error) }
    }
}

/// Why a durable loop could not make an event durable, or stopped.
public enum DurableLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The store failed (or the stream could not be read back); the loop stopped. The reason names the
    /// stream, and the version for an event that did not decode.
    case storeFailed(String)
    /// The loop refused the event (it was stopping or stopped, or its inbox was full).
    case rejected(Rejection)
    /// The loop ended before the event was durable; it may or may not have been recorded.
    case ended

    /// A sentence saying what happened.
    public var description: String {
        switch self {
        case .storeFailed(let reason): "the durable loop stopped: \(reason)"
        case .rejected(let rejection): "the event was rejected: \(rejection)"
        case .ended: "the loop ended before the event was durable"
        }
    }
}
