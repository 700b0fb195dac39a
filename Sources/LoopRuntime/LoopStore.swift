public import EffectHandlers
public import EventSources
public import LoopCore

/// A loop whose outside world may only send inputs, whose handlers may only send feedback, and whose
/// outputs arrive through a typed stream.
///
/// The program's event is a ``/LoopCore/Message`` of `Input` and `Feedback`. ``send(_:)`` takes an
/// `Input`, so a caller cannot forge feedback; the router's handlers get a sender of `Feedback` only.
/// An effect the `output` function recognises is not handled by a route: it is delivered to ``outputs``,
/// in the order the update emitted it.
///
/// ```swift
/// let store = LoopStore(
///     program: Numbers.program,
///     effects: Numbers.router(checker: PrimeChecker()),
///     output: { if case .announce(let output) = $0 { output } else { nil } }
/// )
/// store.send(.add(7))
/// for await output in store.outputs { print(output) }   // .primeReached(7)
/// ```
public final class LoopStore<State: Sendable, Input: Sendable, Feedback: Sendable, Effect: Sendable, Output: Sendable>:
    Sendable
{
    /// The program's event.
    public typealias Event = Message<Input, Feedback>

    /// The loop underneath, for what the store does not wrap.
    private let loop: Loop<State, Event, Effect>
    private let publish: AsyncStream<Output>.Continuation

    /// The outputs, in the order the update emitted them. One consumer; the stream ends when `run()`
    /// returns. Buffered as `outputBuffering` says (unbounded by default, so none is lost).
    public let outputs: AsyncStream<Output>

    /// Creates a store for `program`.
    ///
    /// - Parameters:
    ///   - program: the start and the update, over ``/LoopCore/Message`` events.
    ///   - router: how effects are performed; its handlers send feedback.
    ///   - output: the output an effect stands for, or `nil` for an effect the router performs.
    ///   - outputBuffering: how many outputs wait for a slow consumer.
    ///   - sources: event sources of inputs.
    ///   - inbox: the inbox policy.
    ///   - observer: receives everything the loop does.
    ///   - clock: the clock for effect timeouts and the shutdown grace period.
    public init(
        program: Program<State, Event, Effect>,
        effects router: EffectRouter<Effect, Feedback>,
        output: @escaping @Sendable (Effect) -> Output?,
        outputBuffering: AsyncStream<Output>.Continuation.BufferingPolicy = .unbounded,
        sources: [any EventSource<Input>] = [],
        inbox: InboxPolicy = .unbounded,
        observer: (any LoopObserver<Event, Effect>)? = nil,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        let (outputs, publish) = AsyncStream<Output>.makeStream(bufferingPolicy: outputBuffering)
        self.outputs = outputs
        self.publish = publish
        let published = router.mapEvents { Message<Input, Feedback>.feedback($0) }
            .routeFirst(output, to: ClosureSyncEffectHandler { value, _ in publish.yield(value) })
        self.loop = Loop(
            program: program,
            effects: published,
            sources: sources.map { InputSource<Input, Feedback>(base: $0) },
            inbox: inbox,
            observer: observer,
            clock: clock
        )
    }

    /// Sends `input`; returns whether the loop took it. Never waits; see ``Loop/send(_:)``.
    @discardableResult
    public func send(_ input: Input) -> Delivery {
        loop.send(.input(input))
    }

    /// Sends `input`, waiting for room in a full inbox whose policy suspends senders; see
    /// ``Loop/sendWaitingForRoom(_:)``.
    @discardableResult
    public func sendWaitingForRoom(_ input: Input) async -> Delivery {
        await loop.sendWaitingForRoom(.input(input))
    }

    /// The state after the last processed event.
    public var state: State { loop.state }

    /// The states as they change; see ``Loop/states``.
    public var states: LoopStates<State> { loop.states }

    /// What the loop has done so far.
    public var report: LoopReport { loop.report }

    /// Whether `run()` is under way.
    public var isRunning: Bool { loop.isRunning }

    /// Returns once `run()` has started the loop; see ``Loop/waitUntilRunning()``.
    public func waitUntilRunning() async -> Bool { await loop.waitUntilRunning() }

    /// Runs the loop until it stops, then ends ``outputs``; see ``Loop/run()``. A second call throws
    /// and leaves the running loop's outputs alone.
    @discardableResult
    public func run() async throws -> LoopReport {
        let report = try await loop.run()
        publish.finish()
        return report
    }

    /// Shuts the loop down gracefully; see ``Loop/stop(gracePeriod:)``.
    public func stop(gracePeriod: Duration = .seconds(30)) {
        loop.stop(gracePeriod: gracePeriod)
    }
}

/// One of the store's sources: what it sends arrives as an input.
private struct InputSource<Input: Sendable, Feedback: Sendable>: EventSource {
    let base: any EventSource<Input>

    func run(send: Send<Message<Input, Feedback>>) async throws {
        try await base.run(send: send.map { .input($0) })
    }
}
