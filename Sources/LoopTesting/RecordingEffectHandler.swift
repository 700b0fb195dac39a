public import EffectHandlers
public import LoopCore
internal import LoopRuntime

/// An effect handler that records every effect it is given and holds it in flight until the test
/// answers it, so a test decides what each effect sends back and when.
///
/// ```swift
/// let handler = RecordingEffectHandler<Effect, Event>()
/// // … the loop starts .fetch(7) …
/// await handler.started(atLeast: 1)
/// handler.answer(.fetch(7), with: [.fetched(7, "body")])
/// ```
public final class RecordingEffectHandler<Effect: Equatable & Sendable, Event: Sendable>: EffectHandler, Sendable {
    private struct InFlight {
        var effect: Effect
        var continuation: CheckedContinuation<Result<[Event], any Error>, Never>
    }

    private struct Book {
        var started: [Effect] = []
        var inFlight: [UInt64: InFlight] = [:]
        var nextID: UInt64 = 0
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var cancelled: [Effect] = []
    }

    private let book = Locked(Book())
    private let onChange: (@Sendable () -> Void)?

    /// Creates a handler with nothing recorded.
    public init() {
        onChange = nil
    }

    /// Creates a handler that calls `onChange` whenever an effect arrives or is cancelled.
    init(onChange: @escaping @Sendable () -> Void) {
        self.onChange = onChange
    }

    /// Every effect the handler was given, in the order it was given them.
    public var started: [Effect] {
        book.withLock { $0.started }
    }

    /// The effects given and not yet answered, in the order they were given.
    public var inFlight: [Effect] {
        book.withLock { book in book.inFlight.sorted { $0.key < $1.key }.map(\.value.effect) }
    }

    /// The effects that were cancelled (by their lifecycle, a timeout or shutdown) while held.
    public var cancelled: [Effect] {
        book.withLock { $0.cancelled }
    }

    /// Holds `effect` until the test answers it; sends the answer's events, or throws its error.
    public func handle(_ effect: Effect, send: Send<Event>) async throws {
        let id = book.withLock { book in
            book.nextID += 1
            return book.nextID
        }
        let answer = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<[Event], any Error>, Never>) in
                let watchers = book.withLock { book in
                    book.started.append(effect)
                    if Task.isCancelled {
                        book.cancelled.append(effect)
                        continuation.resume(returning: .failure(CancellationError()))
                    } else {
                        book.inFlight[id] = InFlight(effect: effect, continuation: continuation)
                    }
                    let ready = book.watchers.filter { book.started.count >= $0.count }
                    book.watchers.removeAll { book.started.count >= $0.count }
                    return ready.map(\.continuation)
                }
                for watcher in watchers { watcher.resume() }
                onChange?()
            }
        } onCancel: {
            let held = book.withLock { book -> InFlight? in
                guard let held = book.inFlight.removeValue(forKey: id) else { return nil }
                book.cancelled.append(held.effect)
                return held
            }
            held?.continuation.resume(returning: .failure(CancellationError()))
            onChange?()
        }
        for event in try answer.get() { send(event) }
    }

    /// Answers the first held `effect`: its handler sends `events`, in order, and returns. `false` if no
    /// such effect is held.
    @discardableResult
    public func answer(_ effect: Effect, with events: [Event] = []) -> Bool {
        resume(effect, with: .success(events))
    }

    /// Answers the first held `effect` with a failure: its handler throws `error`. `false` if no such
    /// effect is held.
    @discardableResult
    public func fail(_ effect: Effect, with error: any Error) -> Bool {
        resume(effect, with: .failure(error))
    }

    private func resume(_ effect: Effect, with answer: Result<[Event], any Error>) -> Bool {
        let held = book.withLock { book -> InFlight? in
            guard let id = book.inFlight.filter({ $0.value.effect == effect }).keys.min() else { return nil }
            return book.inFlight.removeValue(forKey: id)
        }
        held?.continuation.resume(returning: answer)
        return held != nil
    }

    /// Returns once the handler has been given at least `count` effects in all.
    public func started(atLeast count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = book.withLock { book in
                guard book.started.count < count else { return true }
                book.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
