internal import LoopCore
public import LoopPersistence

extension JobRunner {
    /// The stream a durable run keeps its events in.
    public static let stream = "jobs"

    /// What a durable run resumes when it starts from a recovered state: the work its recorded events
    /// say was under way when the last process stopped, whatever the way it stopped (`kill -9`
    /// included). A pure function of the state, so a test asserts it as a value.
    ///
    /// - A job that was running is started again, as the same attempt: its process died with the demo
    ///   (or may have finished without its end being recorded), so a job runs **at least once**.
    /// - A run that had ended (its shutdown is recorded) stops at once, so the summary is printed.
    /// - A job waiting to retry needs nothing: its backoff is a durable timer (the program keeps its
    ///   timers, see ``durableProgram(limit:backoff:gracePeriod:)``), recorded with its due time, so the
    ///   recovered loop waits what is left of it (nothing, if it was due while the demo was down).
    /// - Queued jobs need nothing: they start as running ones end, as before.
    public static func resume(_ state: State) -> [Effect] {
        if state.shuttingDown {
            return [.say("the recorded run had ended"), .stop(gracePeriod: state.gracePeriod)]
        }
        var effects: [Effect] = []
        for job in state.ordered {
            switch job.status {
            case .running(let attempt):
                effects.append(
                    .say("resuming \(job.spec.name) (attempt \(attempt)): it was running when the demo stopped")
                )
                effects.append(
                    .run(name: job.spec.name, attempt: attempt, command: job.spec.command, timeout: job.spec.timeout)
                )
            case .waitingToRetry, .queued, .succeeded, .failed, .cancelled:
                break
            }
        }
        return effects
    }

    /// The runner as a durable program: the same start and update as ``program(limit:backoff:gracePeriod:)``,
    /// ``resume(_:)`` for a recovered run, and its retry backoffs kept as durable timers.
    public static func durableProgram(
        limit: Int,
        backoff: Duration = .milliseconds(100),
        gracePeriod: Duration = .seconds(2)
    ) -> DurableProgram<State, Event, Effect> {
        let program = program(limit: limit, backoff: backoff, gracePeriod: gracePeriod)
        return DurableProgram(initial: program.first.state, update: program.update, resume: resume)
            .keepingTimers()
            .replying { if case .answer(let reply) = $0 { reply } else { nil } }
    }
}
