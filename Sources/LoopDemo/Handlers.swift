public import EffectHandlers
public import LoopCore

extension JobRunner {
    /// Runs a job's attempt through the injected shell and sends back how it exited.
    public struct RunHandler: EffectHandler {
        let shell: any Shell

        /// Creates the handler with `shell`.
        public init(shell: any Shell) {
            self.shell = shell
        }

        /// Runs the attempt; a cancelled or timed-out attempt is killed and sends nothing.
        public func handle(_ attempt: Attempt, send: Send<Event>) async throws {
            let (status, output, errors) = try await shell.run(attempt.command)
            send(.exited(name: attempt.name, attempt: attempt.number, status: status, output: output, errors: errors))
        }
    }

    /// One attempt of a job, as the run handler gets it.
    public struct Attempt: Sendable, Equatable {
        /// The job's name.
        public var name: String
        /// The attempt's number, from 1.
        public var number: Int
        /// The shell command.
        public var command: String
    }

    /// Sends that a retry is due. The backoff is not slept here: `retryAfter` is a delayed effect
    /// (``JobRunner/Effect/lifecycle``), so the loop starts this handler once the delay has passed on its
    /// clock, and a `cancelRetry` cancels it while it waits.
    public struct RetryHandler: EffectHandler {
        /// Creates the handler.
        public init() {}

        /// Sends `.retryDue`.
        public func handle(_ retry: (name: String, attempt: Int), send: Send<Event>) async throws {
            send(.retryDue(name: retry.name, attempt: retry.attempt))
        }
    }

    /// How the demo's effects are performed: processes through `shell`, output to `console`; the `stop`
    /// effect stops the loop itself. Backoffs wait on the loop's clock, as delayed effects.
    public static func router(
        shell: any Shell,
        console: Console,
        metrics: (@Sendable () -> String)? = nil
    ) -> EffectRouter<Effect, Event> {
        EffectRouter<Effect, Event>()
            .route(
                { if case .printMetrics = $0 { () } else { nil } },
                to: ClosureSyncEffectHandler { _, _ in
                    let text = metrics?() ?? "# metrics are not collected in this run\n"
                    for line in text.split(separator: "\n") { console.line(String(line)) }
                }
            )
            .route(
                {
                    if case .run(let name, let number, let command, _) = $0 {
                        Attempt(name: name, number: number, command: command)
                    } else {
                        nil
                    }
                },
                to: RunHandler(shell: shell)
            )
            .route(
                { if case .retryAfter(let name, let attempt, _) = $0 { (name, attempt) } else { nil } },
                to: RetryHandler()
            )
            .route(
                { if case .say(let line) = $0 { line } else { nil } },
                to: ClosureSyncEffectHandler { line, _ in console.line(line) }
            )
            // A durable loop hands its answers over itself, once recorded; this route serves the others.
            .route(
                { if case .answer(let reply) = $0 { reply } else { nil } },
                to: ClosureSyncEffectHandler { (reply: Reply<String>, _) in reply.deliver() }
            )
            .route(
                { if case .problem(let line) = $0 { line } else { nil } },
                to: ClosureSyncEffectHandler { line, _ in console.problem(line) }
            )
            .route(
                {
                    if case .progress(let running, let queued, let done, let total) = $0 {
                        (running, queued, done, total)
                    } else {
                        nil
                    }
                },
                to: ClosureSyncEffectHandler { progress, _ in
                    console.progress(running: progress.0, queued: progress.1, done: progress.2, total: progress.3)
                }
            )
            .stopLoop(on: { if case .stop(let gracePeriod) = $0 { gracePeriod } else { nil } })
            .mapErrors { effect, error in
                guard case .run(let name, let attempt, _, _) = effect else { return nil }
                if let effectError = error as? EffectError, effectError.isTimeout {
                    return .timedOut(name: name, attempt: attempt)
                }
                return .runFailed(name: name, attempt: attempt, reason: "\(error)")
            }
    }
}
