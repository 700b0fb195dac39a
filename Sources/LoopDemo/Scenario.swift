public import EventSources
public import LoopCore

/// The built-in scenario: a dozen short jobs covering every outcome, typed as commands over about
/// two seconds, then the end of input. It finishes in a few seconds.
public struct Scenario<C: Clock>: EventSource where C.Duration == Duration {
    /// The scenario's steps: a command line and how long to wait before typing it.
    public let steps: [(after: Duration, line: String)]
    private let clock: C

    /// The scenario, with a marker file for the job that fails once, typed on `clock`.
    public init(marker: String, clock: C) {
        self.clock = clock
        steps = [
            (.zero, "# the built-in scenario: every outcome of a job"),
            (.zero, "run hello -- echo hello from a child process"),
            (.zero, "run count -- seq 1 3"),
            (
                .zero,
                "run flaky --retries 2 -- if [ -f \(marker) ]; then rm -f \(marker); echo second time lucky; else touch \(marker); exit 1; fi"
            ),
            (.milliseconds(100), "run doomed --retries 2 -- echo cannot work; exit 3"),
            (.milliseconds(100), "run sleepy --timeout 0.5 -- sleep 5"),
            (.milliseconds(100), "run long -- sleep 10"),
            (.milliseconds(100), "run compile -- sleep 0.3; echo compiled"),
            (.milliseconds(100), "run test -- sleep 0.2; echo 12 tests passed"),
            (.milliseconds(100), "run lint -- true"),
            (.milliseconds(100), "run package -- sleep 0.4; echo packaged"),
            (.milliseconds(100), "run docs -- echo 5 pages"),
            (.milliseconds(100), "run release -- date +%Y"),
            (.milliseconds(300), "status"),
            (.milliseconds(300), "cancel long"),
            (.milliseconds(200), "run oops --retries many -- true"),
        ]
    }

    /// Types the steps, then ends the input.
    public func run(send: Send<JobRunner.Event>) async throws {
        for step in steps {
            if step.after > .zero { try await clock.sleep(for: step.after) }
            send(Command.event(for: step.line))
        }
        send(.inputEnded)
    }
}
