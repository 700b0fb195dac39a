public import EffectHandlers
public import LoopCore
public import LoopRuntime

/// Drives a real ``/LoopRuntime/Loop`` step by step from a test: send events, assert the state, assert the
/// effects it started, answer them, and assert the events that came back.
///
/// Every effect goes to a ``RecordingEffectHandler`` and stays in flight until the test answers it;
/// time is a ``ManualClock`` the test advances. Use it through `withLoopHarness(_:_:)`, which runs the
/// loop for the test's duration and calls ``finish(fileID:filePath:line:column:)`` at the end:
///
/// ```swift
/// @Test func jobIsRunThenReported() async throws {
///     try await withLoopHarness(Worker.program) { harness in
///         await harness.send(.submitted(job))
///         harness.expectState(Worker.State(running: [job]))
///         harness.expectEffects([.run(job)])
///         await harness.answer(.run(job), with: [.finished(job.id, exitStatus: 0)])
///         harness.expectReceived([.finished(job.id, exitStatus: 0)])
///     }
/// }
/// ```
///
/// ``finish(fileID:filePath:line:column:)`` fails the test if effects are still in flight, or if effects started or events received
/// were never asserted. Steps are exhaustive about the state too: a step (``send(_:skippingState:fileID:filePath:line:column:)``,
/// an answer, a failure, or the finish) fails the test if the step before it changed the state and the
/// test did not assert what it became; opt out per step with `skippingState: true`.
public final class LoopHarness<State: Equatable & Sendable, Event: Equatable & Sendable, Effect: Equatable & Sendable>:
    Sendable
{
    private struct Ledger {
        var sentByTest = 0
        var processed: [Event] = []
        var fromTest: [Bool] = []
        var assertedReceived = 0
        var started: [Effect] = []
        var assertedEffects = 0
        /// The state the test last asserted (or skipped): a step that finds the loop in another one
        /// changed it without the test saying what it became.
        var acknowledged: State

        /// The events that came from effects, not from the test, in the order they were processed.
        var received: [Event] {
            zip(processed, fromTest).filter { !$0.1 }.map(\.0)
        }
    }

    /// The loop under test.
    public let loop: Loop<State, Event, Effect>
    /// The clock the loop's timeouts and grace period run on.
    public let clock: ManualClock
    /// The handler every effect is given to.
    public let effects: RecordingEffectHandler<Effect, Event>
    private let ledger: Locked<Ledger>
    /// Bumped by everything the loop and the recording handler do, so waits are on conditions.
    private let changes = Changes()

    /// Creates a harness for `program`; effects are scheduled with ``/EffectHandlers/EffectLifecycle/concurrent(_:timeout:)``.
    public convenience init(_ program: Program<State, Event, Effect>) {
        self.init(program, router: EffectRouter<Effect, Event>())
    }

    /// Creates a harness for `program`; effects are scheduled by their ``/EffectHandlers/ManagedEffect`` lifecycle.
    public convenience init(_ program: Program<State, Event, Effect>) where Effect: ManagedEffect {
        self.init(program, router: EffectRouter<Effect, Event>())
    }

    private init(_ program: Program<State, Event, Effect>, router: EffectRouter<Effect, Event>) {
        let changes = self.changes
        let recording = RecordingEffectHandler<Effect, Event>(onChange: { changes.bump() })
        let clock = ManualClock()
        let ledger = Locked(Ledger(acknowledged: program.first.state))
        self.ledger = ledger
        let observer = ClosureLoopObserver<Event, Effect> { activity in
            defer { changes.bump() }
            if case .effectStarted(let effect, _, _) = activity {
                ledger.withLock { $0.started.append(effect) }
                return
            }
            guard case .eventProcessed(let event, let origin, _, _, _, _) = activity else { return }
            ledger.withLock { ledger in
                ledger.processed.append(event)
                ledger.fromTest.append(origin == .outside)
            }
        }
        self.effects = recording
        self.clock = clock
        self.loop = Loop(
            program: program,
            effects: router.route({ $0 }, to: recording),
            observer: observer,
            clock: clock
        )
    }

    /// The loop's current state.
    public var state: State { loop.state }

    /// Sends `event` to the loop and returns once it has been processed and the effects it started have
    /// reached the recording handler.
    ///
    /// A step is exhaustive: if the previous step changed the state and the test did not assert it
    /// (``expectState(_:fileID:filePath:line:column:)``), this one fails the test, naming the change.
    /// Pass `skippingState: true` for a step whose state change the test does not care to assert.
    @discardableResult
    public func send(
        _ event: Event,
        skippingState: Bool = false,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async -> Delivery {
        await settle()
        checkStateAsserted(SourceSite(fileID: fileID, filePath: filePath, line: line, column: column))
        let delivery = loop.send(event)
        await settle()
        if skippingState { skipState() }
        return delivery
    }

    /// Takes the loop's current state as asserted, so the next step does not fail for a change the test
    /// chose not to spell out.
    public func skipState() {
        let state = loop.state
        ledger.withLock { $0.acknowledged = state }
    }

    /// Fails the test if the state changed since the test last asserted it; either way, takes the
    /// current state as known, so a change fails the test once.
    @discardableResult
    private func checkStateAsserted(_ site: SourceSite) -> [Difference] {
        let state = loop.state
        let known = ledger.withLock { ledger in
            defer { ledger.acknowledged = state }
            return ledger.acknowledged
        }
        guard state != known else { return [] }
        let differences = Then<State, Effect>.differences(known, state, at: "state changed, never asserted")
        _ = flag(SpecResult(subject: "harness step", differences: differences), site)
        return differences
    }

    /// Answers the in-flight `effect` with `events` and returns once they have been processed. Fails the
    /// test if no such effect is in flight.
    public func answer(
        _ effect: Effect,
        with events: [Event] = [],
        skippingState: Bool = false,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async {
        let site = SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        let before = (ledger.withLock { $0.processed.count }, ended)
        await settle()
        checkStateAsserted(site)
        guard effects.answer(effect, with: events) else {
            site.fail("no effect \(Rendering.of(effect)) is in flight; in flight: \(Rendering.of(effects.inFlight))")
            return
        }
        await waitUntil { ledger.withLock { $0.processed.count } >= before.0 + events.count && ended > before.1 }
        await settle()
        if skippingState { skipState() }
    }

    /// Fails the in-flight `effect` with `error` (its handler throws it) and returns once the loop has
    /// dealt with it.
    public func fail(
        _ effect: Effect,
        with error: any Error,
        skippingState: Bool = false,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async {
        let before = ended
        await settle()
        checkStateAsserted(SourceSite(fileID: fileID, filePath: filePath, line: line, column: column))
        guard effects.fail(effect, with: error) else { return }
        await waitUntil { ended > before }
        await settle()
        if skippingState { skipState() }
    }

    /// Checks the loop's state.
    @discardableResult
    public func expectState(
        _ expected: State,
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) -> SpecResult {
        let state = loop.state
        ledger.withLock { $0.acknowledged = state }
        return compare(
            state,
            expected,
            at: "state",
            subject: "harness state",
            SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }

    /// Checks the effects the loop started since the last check, in the order it started them, and marks
    /// them asserted.
    @discardableResult
    public func expectEffects(
        _ expected: [Effect],
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) -> SpecResult {
        let actual = ledger.withLock { ledger in
            defer { ledger.assertedEffects = ledger.started.count }
            return Array(ledger.started[ledger.assertedEffects...])
        }
        return compare(
            actual,
            expected,
            at: "effects",
            subject: "harness effects started",
            SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }

    /// Checks the events the loop received from its effects since the last check, in order, and marks
    /// them asserted. Events the test sent itself are not included.
    @discardableResult
    public func expectReceived(
        _ expected: [Event],
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) -> SpecResult {
        let actual = ledger.withLock { ledger in
            let received = ledger.received
            defer { ledger.assertedReceived = received.count }
            return Array(received[ledger.assertedReceived...])
        }
        return compare(
            actual,
            expected,
            at: "received",
            subject: "harness events received",
            SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }

    /// Fails the test if effects are still in flight, or if effects started or events received since the
    /// last checks were never asserted.
    @discardableResult
    public func finish(
        fileID: String = #fileID,
        filePath: StaticString = #filePath,
        line: UInt = #line,
        column: UInt = #column
    ) async -> SpecResult {
        await settle()
        let state = loop.state
        let known = ledger.withLock { ledger in
            defer { ledger.acknowledged = state }
            return ledger.acknowledged
        }
        let (unassertedEffects, unassertedEvents) = ledger.withLock { ledger in
            let received = ledger.received
            return (
                Array(ledger.started.dropFirst(ledger.assertedEffects)),
                Array(received.dropFirst(ledger.assertedReceived))
            )
        }
        var differences: [Difference] =
            state == known ? [] : Then<State, Effect>.differences(known, state, at: "state changed, never asserted")
        let held = effects.inFlight
        if !held.isEmpty {
            differences.append(Difference(path: "effects in flight", expected: "none", actual: Rendering.of(held)))
        }
        if !unassertedEffects.isEmpty {
            differences.append(
                Difference(
                    path: "effects started, never asserted",
                    expected: "none",
                    actual: Rendering.of(unassertedEffects)
                )
            )
        }
        if !unassertedEvents.isEmpty {
            differences.append(
                Difference(
                    path: "events received, never asserted",
                    expected: "none",
                    actual: Rendering.of(unassertedEvents)
                )
            )
        }
        return flag(
            SpecResult(subject: "harness finish", differences: differences),
            SourceSite(fileID: fileID, filePath: filePath, line: line, column: column)
        )
    }

    /// Compares `actual` with `expected`, failing the running test with the differences at `path`.
    private func compare<Value: Equatable>(
        _ actual: Value,
        _ expected: Value,
        at path: String,
        subject: String,
        _ site: SourceSite
    ) -> SpecResult {
        let differences = actual == expected ? [] : Then<State, Effect>.differences(expected, actual, at: path)
        return flag(SpecResult(subject: subject, differences: differences), site)
    }

    private func flag(_ result: SpecResult, _ site: SourceSite) -> SpecResult {
        if !result.passed { site.fail(result.description) }
        return result
    }

    /// How many effects have ended, however they ended.
    private var ended: Int {
        let report = loop.report
        return report.effectsStarted - report.effectsInFlight
    }

    /// Returns once the loop is idle and every effect it let in has reached the recording handler.
    private func settle() async {
        await waitUntil { loop.isIdle && effects.inFlight.count >= loop.liveEffects }
    }

    /// Returns once `condition` holds, checking it again after each thing the loop or the handler does,
    /// and each time the loop's drain ends (which no activity reports).
    private func waitUntil(_ condition: () -> Bool) async {
        while true {
            let seen = changes.version
            if condition() { return }
            if !loop.isIdle {
                await loop.whenIdle()
            } else {
                await changes.wait(after: seen)
            }
        }
    }
}

/// Runs `body` with a ``LoopHarness`` for `program` whose loop runs for the duration of `body`; then
/// calls ``LoopHarness/finish(fileID:filePath:line:column:)`` and stops the loop, cancelling whatever is still in flight.
public func withLoopHarness<State, Event, Effect>(
    _ program: Program<State, Event, Effect>,
    fileID: String = #fileID,
    filePath: StaticString = #filePath,
    line: UInt = #line,
    column: UInt = #column,
    _ body: (LoopHarness<State, Event, Effect>) async throws -> Void
) async throws {
    try await runHarness(
        LoopHarness(program),
        SourceSite(fileID: fileID, filePath: filePath, line: line, column: column),
        body
    )
}

/// Runs `body` with a ``LoopHarness`` for `program`, scheduling effects by their lifecycle; see
/// ``withLoopHarness(_:fileID:filePath:line:column:_:)``.
public func withLoopHarness<State, Event, Effect: ManagedEffect>(
    _ program: Program<State, Event, Effect>,
    fileID: String = #fileID,
    filePath: StaticString = #filePath,
    line: UInt = #line,
    column: UInt = #column,
    _ body: (LoopHarness<State, Event, Effect>) async throws -> Void
) async throws {
    try await runHarness(
        LoopHarness(program),
        SourceSite(fileID: fileID, filePath: filePath, line: line, column: column),
        body
    )
}

private func runHarness<State, Event, Effect>(
    _ harness: LoopHarness<State, Event, Effect>,
    _ site: SourceSite,
    _ body: (LoopHarness<State, Event, Effect>) async throws -> Void
) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await harness.loop.run() }
        _ = await harness.loop.waitUntilRunning()
        do {
            try await body(harness)
        } catch {
            harness.loop.stop(gracePeriod: .zero)
            throw error
        }
        await harness.finish(fileID: site.fileID, filePath: site.filePath, line: site.line, column: site.column)
        harness.loop.stop(gracePeriod: .zero)
        try await group.waitForAll()
    }
}

/// A counter of changes that tasks can wait on: ``wait(after:)`` returns once the count has moved past
/// the value the waiter last saw, so no change between a check and the wait is missed.
final class Changes: Sendable {
    private struct Count {
        var version: UInt64 = 0
        var waiters: [(after: UInt64, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let count = Locked(Count())

    /// The number of changes so far.
    var version: UInt64 { count.withLock { $0.version } }

    /// Records a change, waking every waiter.
    func bump() {
        let waiters = count.withLock { count in
            count.version &+= 1
            defer { count.waiters = [] }
            return count.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once a change after `version` has happened.
    func wait(after version: UInt64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let moved = count.withLock { count in
                if count.version != version { return true }
                count.waiters.append((version, continuation))
                return false
            }
            if moved { continuation.resume() }
        }
    }
}
