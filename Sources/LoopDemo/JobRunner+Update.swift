internal import LoopCore

extension JobRunner {
    /// The runner's logic: applies `event` to `state` and returns the effects, in order.
    public static func update(_ state: inout State, _ event: Event) -> [Effect] {
        var effects: [Effect] = []
        switch event {
        case .submit(let spec):
            submit(spec, &state, &effects)
        case .request(let spec, let replyTo):
            submit(spec, &state, &effects)
            // What became of it, as its `say` line says it.
            if case .say(let line) = effects.last { effects.append(.answer(replyTo.reply(line))) }
        case .exited(let name, let attempt, let status, let output, let errors):
            guard state.jobs[name]?.status == .running(attempt: attempt) else { break }
            state.jobs[name]?.output = output
            if status == 0 {
                state.jobs[name]?.status = .succeeded(attempts: attempt)
                effects.append(.say("\(name) succeeded" + (attempt > 1 ? " on attempt \(attempt)" : "")))
            } else {
                fail(name, attempt: attempt, reason: "exit status \(status)" + errorTail(errors), &state, &effects)
            }
        case .timedOut(let name, let attempt):
            guard state.jobs[name]?.status == .running(attempt: attempt) else { break }
            let limit = state.jobs[name]?.spec.timeout.map { " after \($0.seconds)" } ?? ""
            fail(name, attempt: attempt, reason: "timed out" + limit, &state, &effects)
        case .runFailed(let name, let attempt, let reason):
            guard state.jobs[name]?.status == .running(attempt: attempt) else { break }
            fail(name, attempt: attempt, reason: reason, &state, &effects)
        case .retryDue(let name, let attempt):
            guard state.jobs[name]?.status == .waitingToRetry(attempt: attempt), !state.shuttingDown else { break }
            state.jobs[name]?.status = .queued
            state.queue.insert(name, at: 0)
        case .cancel(let name):
            cancel(name, &state, &effects)
        case .metricsRequested:
            effects.append(.printMetrics)
        case .statusRequested:
            effects += state.ordered.map { .say("  \($0.spec.name): \(describe($0))") }
        case .tick:
            let done = state.jobs.values.count(where: \.status.isFinal)
            effects.append(
                .progress(running: state.runningCount, queued: state.queue.count, done: done, total: state.jobs.count)
            )
        case .invalidInput(let message):
            effects.append(.problem("error: \(message)"))
        case .inputEnded:
            state.inputEnded = true
        case .ignored:
            break
        case .shutdown:
            guard !state.shuttingDown else { break }
            state.shuttingDown = true
            for name in state.order {
                switch state.jobs[name]?.status {
                case .queued:
                    state.jobs[name]?.status = .cancelled
                case .waitingToRetry:
                    state.jobs[name]?.status = .cancelled
                    effects.append(.cancelRetry(name: name))
                default:
                    break
                }
            }
            state.queue = []
            effects.append(
                .say("shutting down: \(state.runningCount) running, given \(state.gracePeriod.seconds) to finish")
            )
            effects.append(.stop(gracePeriod: state.gracePeriod))
        }
        startWaiting(&state, &effects)
        stopIfDone(&state, &effects)
        return effects
    }

    private static func submit(_ spec: Spec, _ state: inout State, _ effects: inout [Effect]) {
        if state.shuttingDown {
            effects.append(.say("rejected \(spec.name): shutting down"))
        } else if spec.name.isEmpty || spec.command.isEmpty {
            effects.append(.say("rejected: a job needs a name and a command"))
        } else if spec.name.utf8.contains(0) || spec.command.utf8.contains(0) {
            // A NUL ends the command the shell sees: what ran would not be what was recorded.
            effects.append(.say("rejected: a job's name and command cannot contain a NUL character"))
        } else if state.jobs[spec.name] != nil {
            effects.append(.say("rejected \(spec.name): a job with this name exists"))
        } else if spec.retries < 0 {
            effects.append(.say("rejected \(spec.name): retries cannot be negative"))
        } else {
            state.jobs[spec.name] = Job(spec: spec)
            state.order.append(spec.name)
            state.queue.append(spec.name)
            effects.append(.say("queued \(spec.name)"))
        }
    }

    private static func fail(
        _ name: String,
        attempt: Int,
        reason: String,
        _ state: inout State,
        _ effects: inout [Effect]
    ) {
        guard let job = state.jobs[name] else { return }
        if attempt <= job.spec.retries && !state.shuttingDown {
            let delay = backoff(base: state.backoff, retry: attempt)
            state.jobs[name]?.status = .waitingToRetry(attempt: attempt + 1)
            effects.append(
                .say("\(name) failed (\(reason)), retry \(attempt) of \(job.spec.retries) in \(delay.seconds)")
            )
            effects.append(.retryAfter(name: name, attempt: attempt + 1, delay: delay))
        } else {
            state.jobs[name]?.status = .failed(attempts: attempt, reason: reason)
            effects.append(.say("\(name) failed after \(attempt) attempt\(attempt == 1 ? "" : "s"): \(reason)"))
        }
    }

    private static func cancel(_ name: String, _ state: inout State, _ effects: inout [Effect]) {
        guard let job = state.jobs[name] else {
            effects.append(.say("cannot cancel \(name): no such job"))
            return
        }
        switch job.status {
        case .queued:
            state.queue.removeAll { $0 == name }
        case .running:
            effects.append(.cancelRun(name: name))
        case .waitingToRetry:
            effects.append(.cancelRetry(name: name))
        case .succeeded, .failed, .cancelled:
            effects.append(.say("cannot cancel \(name): it already \(describe(job))"))
            return
        }
        state.jobs[name]?.status = .cancelled
        effects.append(.say("\(name) cancelled"))
    }

    /// Starts waiting jobs while there is room.
    private static func startWaiting(_ state: inout State, _ effects: inout [Effect]) {
        while !state.shuttingDown, state.runningCount < state.limit, !state.queue.isEmpty {
            let name = state.queue.removeFirst()
            guard var job = state.jobs[name], job.status == .queued else { continue }
            job.attempts += 1
            job.status = .running(attempt: job.attempts)
            state.jobs[name] = job
            effects.append(.say("started \(name)" + (job.attempts > 1 ? " (attempt \(job.attempts))" : "")))
            effects.append(
                .run(name: name, attempt: job.attempts, command: job.spec.command, timeout: job.spec.timeout)
            )
        }
    }

    /// Stops the service once the input has ended and every job is done.
    private static func stopIfDone(_ state: inout State, _ effects: inout [Effect]) {
        guard !state.shuttingDown, state.inputEnded, state.allFinal else { return }
        state.shuttingDown = true
        // Every job is done, but a handler that reported its job's end may not have returned yet: a zero
        // grace period would cut it off and report the shutdown as past its deadline when nothing was.
        effects.append(.stop(gracePeriod: state.gracePeriod))
    }

    /// What a failed attempt said last on its standard error, as `: <line>` (at most 200 characters),
    /// or nothing: "exit status 127" alone hides "command not found".
    static func errorTail(_ errors: String) -> String {
        guard let last = errors.split(whereSeparator: \.isNewline).last(where: { !$0.allSatisfy(\.isWhitespace) })
        else { return "" }
        let line = last.count > 200 ? "…" + last.suffix(199) : String(last)
        return ": " + line
    }

    /// A job's status in words.
    public static func describe(_ job: Job) -> String {
        switch job.status {
        case .queued: "queued"
        case .running(let attempt): "running (attempt \(attempt))"
        case .waitingToRetry(let attempt): "waiting to retry (attempt \(attempt))"
        case .succeeded(let attempts): "succeeded" + (attempts > 1 ? " after \(attempts) attempts" : "")
        case .failed(let attempts, let reason): "failed after \(attempts) attempt\(attempts == 1 ? "" : "s"): \(reason)"
        case .cancelled: "cancelled"
        }
    }

    /// The final summary table: one row per job in submission order. A job still running when the
    /// service stopped was cancelled by the shutdown.
    public static func summary(_ state: State) -> [String] {
        let width = max(4, state.order.map(\.count).max() ?? 0)
        let rows = state.ordered.map { job -> String in
            let outcome = job.status.isRunning ? "cancelled at shutdown" : describe(job)
            return job.spec.name.padding(width) + "  " + outcome
        }
        let counts = [
            ("succeeded", state.jobs.values.count { if case .succeeded = $0.status { true } else { false } }),
            ("failed", state.jobs.values.count { if case .failed = $0.status { true } else { false } }),
            ("cancelled", state.jobs.values.count { $0.status == .cancelled || $0.status.isRunning }),
        ]
        return ["job".padding(width) + "  outcome"] + rows
            + [counts.map { "\($0.1) \($0.0)" }.joined(separator: ", ")]
    }
}

extension Duration {
    /// `1.5s`, `250ms`: short and readable.
    var seconds: String {
        let milliseconds = components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000
        return milliseconds % 1_000 == 0
            ? "\(milliseconds / 1_000)s"
            : milliseconds < 1_000 ? "\(milliseconds)ms" : "\(Double(milliseconds) / 1_000)s"
    }
}

extension String {
    func padding(_ width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
