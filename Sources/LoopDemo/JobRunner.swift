public import EffectHandlers
public import LoopCore

/// The demo's logic: a job runner, as one pure update.
///
/// Jobs are submitted with a name, a shell command, an optional timeout and a retry limit. At most
/// `limit` run at once; the rest wait in submission order. A failed attempt (non-zero exit, timeout,
/// or a command that cannot start) is retried after an exponential backoff until the retry limit,
/// then the job is reported failed. A job can be cancelled by name; a status report can be asked
/// for; shutdown cancels what has not started and lets the running jobs finish within a grace period.
public enum JobRunner {
    /// What to run.
    public struct Spec: Codable, Equatable, Hashable, Sendable {
        /// The job's unique name.
        public var name: String
        /// The command, run with `/bin/sh -c`.
        public var command: String
        /// How long one attempt may run; `nil` for no limit.
        public var timeout: Duration?
        /// How many times a failed job is retried.
        public var retries: Int

        /// Creates a job specification.
        public init(name: String, command: String, timeout: Duration? = nil, retries: Int = 0) {
            self.name = name
            self.command = command
            self.timeout = timeout
            self.retries = retries
        }
    }

    /// Where a job is.
    public enum Status: Codable, Equatable, Hashable, Sendable {
        /// Waiting for a free slot.
        case queued
        /// Running its `attempt`th attempt.
        case running(attempt: Int)
        /// Waiting for the backoff before its next attempt.
        case waitingToRetry(attempt: Int)
        /// Succeeded on attempt `attempts`.
        case succeeded(attempts: Int)
        /// Failed for good after `attempts` attempts.
        case failed(attempts: Int, reason: String)
        /// Cancelled before it could finish.
        case cancelled

        /// Whether an attempt is running.
        public var isRunning: Bool {
            if case .running = self { true } else { false }
        }

        /// Whether the job is done, one way or another.
        public var isFinal: Bool {
            switch self {
            case .succeeded, .failed, .cancelled: true
            case .queued, .running, .waitingToRetry: false
            }
        }
    }

    /// One job and its progress.
    public struct Job: Codable, Equatable, Hashable, Sendable {
        /// What it runs.
        public var spec: Spec
        /// Where it is.
        public var status: Status
        /// How many attempts have started.
        public var attempts: Int
        /// The last attempt's captured output, trimmed.
        public var output: String

        /// Creates a job.
        public init(spec: Spec, status: Status = .queued, attempts: Int = 0, output: String = "") {
            self.spec = spec
            self.status = status
            self.attempts = attempts
            self.output = output
        }
    }

    /// The runner's whole state.
    public struct State: Codable, Equatable, Sendable {
        /// How many jobs may run at once.
        public var limit: Int
        /// The first retry's delay; each further retry doubles it.
        public var backoff: Duration
        /// The grace period running jobs get at shutdown.
        public var gracePeriod: Duration
        /// Every job, by name.
        public var jobs: [String: Job] = [:]
        /// Names in submission order.
        public var order: [String] = []
        /// Names waiting for a slot, first first.
        public var queue: [String] = []
        /// Whether shutdown has begun.
        public var shuttingDown = false
        /// Whether no more jobs will be submitted (the input ended).
        public var inputEnded = false

        /// Creates an empty runner.
        public init(limit: Int, backoff: Duration = .milliseconds(100), gracePeriod: Duration = .seconds(2)) {
            self.limit = max(1, limit)
            self.backoff = backoff
            self.gracePeriod = gracePeriod
        }

        /// How many jobs are running.
        public var runningCount: Int {
            jobs.values.count(where: \.status.isRunning)
        }

        /// Whether every job is done.
        public var allFinal: Bool {
            jobs.values.allSatisfy(\.status.isFinal)
        }

        /// Whether every job submitted succeeded (true with none): the demo's exit status is 0 then, 1
        /// otherwise.
        public var allSucceeded: Bool {
            jobs.values.allSatisfy { job in
                if case .succeeded = job.status { true } else { false }
            }
        }

        /// The jobs in submission order.
        public var ordered: [Job] {
            order.compactMap { jobs[$0] }
        }
    }

    /// What happens to the runner.
    public enum Event: Codable, Equatable, Sendable {
        /// A job is submitted.
        case submit(Spec)
        /// A job is submitted by a caller waiting for the answer: `queued NAME`, or why it was
        /// rejected (a cluster's `loop-demo submit --key`).
        case request(Spec, replyTo: ReplyTo<String>)
        /// An attempt exited with `status`, printed `output`, and ended its standard error with `errors`.
        case exited(name: String, attempt: Int, status: Int32, output: String, errors: String = "")
        /// An attempt ran past its timeout and was stopped.
        case timedOut(name: String, attempt: Int)
        /// An attempt could not start or run.
        case runFailed(name: String, attempt: Int, reason: String)
        /// A job's backoff is over.
        case retryDue(name: String, attempt: Int)
        /// Cancel a job by name.
        case cancel(String)
        /// Report the status of every job.
        case statusRequested
        /// Print the loop's metrics (Prometheus text format).
        case metricsRequested
        /// The periodic status tick.
        case tick
        /// A line of input that is not a command.
        case invalidInput(String)
        /// No more jobs will be submitted; stop once all are done.
        case inputEnded
        /// A blank line or a comment: nothing to do.
        case ignored
        /// Shut down now: cancel what has not started, give the running jobs the grace period.
        case shutdown
    }

    /// What the runner asks the world to do.
    public enum Effect: Equatable, Sendable, Codable, ManagedEffect {
        /// Run attempt `attempt` of a job's command.
        case run(name: String, attempt: Int, command: String, timeout: Duration?)
        /// Send `.retryDue` after `delay`.
        case retryAfter(name: String, attempt: Int, delay: Duration)
        /// Cancel a job's running attempt.
        case cancelRun(name: String)
        /// Cancel a job's pending retry.
        case cancelRetry(name: String)
        /// Print a line of progress.
        case say(String)
        /// Print the loop's metrics.
        case printMetrics
        /// Print a line about a problem with the input, to standard error.
        case problem(String)
        /// Show the live status (a progress line on a terminal).
        case progress(running: Int, queued: Int, done: Int, total: Int)
        /// Stop the service, giving running attempts `gracePeriod` to finish.
        case stop(gracePeriod: Duration)
        /// Answer a request's caller.
        case answer(Reply<String>)

        /// Runs are keyed per job (so a cancel reaches them) and carry the job's timeout.
        public var lifecycle: EffectLifecycle {
            switch self {
            // Docs/Demo.md shows these lines (`.ci/guide-check.swift`).
            // snippet
            case .run(let name, _, _, let timeout): .concurrent("run-\(name)", timeout: timeout)
            case .retryAfter(let name, _, let delay): .delayed(by: delay, key: "retry-\(name)")
            case .cancelRun(let name): .cancel("run-\(name)")
            case .cancelRetry(let name): .cancel("retry-\(name)")
            case .say, .problem, .progress, .stop, .printMetrics, .answer: .concurrent()
            // end snippet
            }
        }
    }

    /// The runner as a program: empty at the start, running at most `limit` jobs at once.
    public static func program(
        limit: Int,
        backoff: Duration = .milliseconds(100),
        gracePeriod: Duration = .seconds(2)
    ) -> Program<State, Event, Effect> {
        Program(
            first: First(state: State(limit: limit, backoff: backoff, gracePeriod: gracePeriod)),
            update: Update(update)
        )
    }

    /// The longest backoff: without a cap, 100 retries of a 100 ms base would wait about 29 hours.
    public static var maximumBackoff: Duration { .seconds(60) }

    /// The backoff before retry number `retry` (1 for the first retry): `base` doubled each time, at
    /// most ``maximumBackoff``.
    public static func backoff(base: Duration, retry: Int) -> Duration {
        min(base * (1 << min(max(retry - 1, 0), 20)), maximumBackoff)
    }
}
