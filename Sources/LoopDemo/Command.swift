/// The demo's text commands, as typed on standard input or written in the built-in scenario.
///
/// ```
/// run NAME [--timeout SECONDS] [--retries N] -- COMMAND
/// cancel NAME
/// status
/// metrics
/// quit
/// ```
public enum Command {
    /// The usage lines, for errors and `--help`.
    public static let usage = [
        "run NAME [--timeout SECONDS] [--retries N] -- COMMAND",
        "cancel NAME",
        "status",
        "metrics",
        "quit",
    ]

    /// The event a line asks for: `.invalidInput` naming the problem for a line that is not a command,
    /// `.ignored` for a blank line or a `#` comment.
    public static func event(for line: String) -> JobRunner.Event {
        switch parse(line) {
        case .success(let event): event
        case .failure(let error): .invalidInput(error.description)
        }
    }

    /// The event a line asks for, or a one-line error naming the problem.
    public static func parse(_ line: String) -> Result<JobRunner.Event, CommandError> {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let verb = words.first, !verb.hasPrefix("#") else { return .success(.ignored) }
        switch verb {
        case "run":
            return parseRun(line, words)
        case "cancel":
            guard words.count == 2 else { return .failure(CommandError("usage: cancel NAME")) }
            return .success(.cancel(words[1]))
        case "status":
            guard words.count == 1 else { return .failure(CommandError("usage: status")) }
            return .success(.statusRequested)
        case "metrics":
            guard words.count == 1 else { return .failure(CommandError("usage: metrics")) }
            return .success(.metricsRequested)
        case "quit":
            guard words.count == 1 else { return .failure(CommandError("usage: quit")) }
            return .success(.shutdown)
        default:
            return .failure(
                CommandError("unknown command '\(verb.prefix(40))'; commands: run, cancel, status, metrics, quit")
            )
        }
    }

    private static func parseRun(_ line: String, _ words: [String]) -> Result<JobRunner.Event, CommandError> {
        guard let separator = line.indices.first(where: { line[$0...].hasPrefix(" -- ") }) else {
            return .failure(CommandError("usage: \(usage[0])"))
        }
        let command = String(line[line.index(separator, offsetBy: 4)...]).trimmingWhitespace()
        let options = line[..<separator].split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard options.count >= 2, !command.isEmpty else { return .failure(CommandError("usage: \(usage[0])")) }
        var spec = JobRunner.Spec(name: options[1], command: command)
        var index = 2
        while index < options.count {
            guard index + 1 < options.count else {
                return .failure(CommandError("\(options[index]) needs a value"))
            }
            let value = options[index + 1]
            switch options[index] {
            case "--timeout":
                guard let seconds = Double(value), seconds.isFinite, seconds >= 0.01, seconds <= 86_400 else {
                    return .failure(
                        CommandError("--timeout takes seconds from 0.01 to 86400, not '\(value.prefix(20))'")
                    )
                }
                spec.timeout = Duration.milliseconds(Int((seconds * 1_000).rounded()))
            case "--retries":
                guard let retries = Int(value), (0...100).contains(retries) else {
                    return .failure(
                        CommandError("--retries takes a whole number from 0 to 100, not '\(value.prefix(20))'")
                    )
                }
                spec.retries = retries
            default:
                return .failure(CommandError("unknown option '\(options[index].prefix(20))' for run"))
            }
            index += 2
        }
        return .success(.submit(spec))
    }
}

/// A line that is not a command, and why.
public struct CommandError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The problem, in one line.
    public let description: String

    /// Creates an error saying `description`.
    public init(description: String) {
        self.description = description
    }

    init(_ description: String) {
        self.description = description
    }
}
