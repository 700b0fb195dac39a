import LoopDemo
import Testing

@Suite struct CommandTests {
    typealias Spec = JobRunner.Spec

    @Test(arguments: [
        ("run build -- make all", JobRunner.Event.submit(Spec(name: "build", command: "make all"))),
        (
            "run t --timeout 1.5 --retries 2 -- sleep 1 && echo  done",
            .submit(Spec(name: "t", command: "sleep 1 && echo  done", timeout: .milliseconds(1_500), retries: 2))
        ),
        ("run x --retries 0 -- a -- b", .submit(Spec(name: "x", command: "a -- b"))),
        ("  cancel build  ", .cancel("build")),
        ("status", .statusRequested),
        ("quit", .shutdown),
        ("", .ignored),
        ("   ", .ignored),
        ("# a comment", .ignored),
    ])
    func commandsBecomeEvents(line: String, event: JobRunner.Event) {
        #expect(Command.event(for: line) == event)
    }

    @Test(arguments: [
        ("fly", "unknown command 'fly'; commands: run, cancel, status, metrics, quit"),
        ("run", "usage: run NAME [--timeout SECONDS] [--retries N] -- COMMAND"),
        ("run a make", "usage: run NAME [--timeout SECONDS] [--retries N] -- COMMAND"),
        ("run a --  ", "usage: run NAME [--timeout SECONDS] [--retries N] -- COMMAND"),
        ("run -- true", "usage: run NAME [--timeout SECONDS] [--retries N] -- COMMAND"),
        ("run a --timeout -- true", "--timeout needs a value"),
        ("run a --timeout 0 -- true", "--timeout takes seconds from 0.01 to 86400, not '0'"),
        ("run a --timeout 0.0001 -- true", "--timeout takes seconds from 0.01 to 86400, not '0.0001'"),
        ("run a --timeout nan -- true", "--timeout takes seconds from 0.01 to 86400, not 'nan'"),
        ("run a --retries -1 -- true", "--retries takes a whole number from 0 to 100, not '-1'"),
        (
            "run a --retries 99999999999999999999 -- true",
            "--retries takes a whole number from 0 to 100, not '99999999999999999999'"
        ),
        ("run a --colour red -- true", "unknown option '--colour' for run"),
        ("cancel", "usage: cancel NAME"),
        ("cancel a b", "usage: cancel NAME"),
        ("status now", "usage: status"),
        ("quit please", "usage: quit"),
    ])
    func malformedLinesNameTheirProblem(line: String, problem: String) {
        #expect(Command.event(for: line) == .invalidInput(problem))
    }
}
