/// A misuse of a loop's phases (running it twice, say), thrown instead of a crash.
public struct LoopError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case alreadyRunning
        case alreadyStopped
    }

    private let code: Code

    /// `run()` was called on a loop that is already running: a loop runs once.
    public static let alreadyRunning = LoopError(code: .alreadyRunning)
    /// `run()` was called on a loop that has stopped: a loop runs once; make a new one.
    public static let alreadyStopped = LoopError(code: .alreadyStopped)

    /// A sentence saying what went wrong.
    public var description: String {
        switch code {
        case .alreadyRunning: "this loop is already running; a loop runs once"
        case .alreadyStopped: "this loop has stopped; a loop runs once, so create a new one"
        }
    }
}
