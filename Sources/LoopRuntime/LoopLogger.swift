#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// The default observer: one line per happening, written to standard error.
///
/// ```
/// [worker] event submitted("a") processed in 1.2µs, inbox 0
/// [worker] effect run("a") started (.serial("job-a"))
/// [worker] effect run("a") failed: exit status 3 -> failed("a")
/// ```
///
/// Each line is written with one call, so lines from different threads do not interleave.
public struct LoopLogger<Event: Sendable, Effect: Sendable>: LoopObserver {
    private let label: String
    private let write: @Sendable (String) -> Void

    /// Creates a logger whose lines start with `[label]`, written by `write` (standard error by default).
    public init(label: String = "loop", write: (@Sendable (String) -> Void)? = nil) {
        self.label = label
        self.write = write ?? Self.writeToStandardError
    }

    /// Writes `line` and a newline to standard error in one `write` call.
    private static func writeToStandardError(_ line: String) {
        var text = line + "\n"
        text.withUTF8 { bytes in _ = systemWrite(2, bytes.baseAddress, bytes.count) }
    }

    /// Writes one line for `activity`.
    public func observe(_ activity: LoopActivity<Event, Effect>) {
        write("[\(label)] " + Self.line(for: activity))
    }

    /// The line, without the label, that describes `activity`.
    public static func line(for activity: LoopActivity<Event, Effect>) -> String {
        switch activity {
        case .eventProcessed(let event, let origin, let duration, let depth, let effects, _):
            "event \(event) from \(origin) processed in \(duration), inbox \(depth)"
                + (effects.isEmpty ? "" : ", effects \(effects)")
        case .eventRejected(let event, let reason):
            "event \(event) rejected: \(reason)"
        case .eventDropped(let event):
            "event \(event) dropped"
        case .effectStarted(let effect, let id, let lifecycle):
            "effect #\(id) \(effect) started (\(lifecycle))"
        case .effectCompleted(let effect, let id, _):
            "effect #\(id) \(effect) completed"
        case .effectFailed(let effect, let id, let error, let mapped, _):
            "effect #\(id) \(effect) failed: \(error)" + (mapped.map { " -> \($0)" } ?? " (unhandled)")
        case .effectCancelled(let effect, let id):
            "effect #\(id) \(effect) cancelled"
        case .effectTimedOut(let effect, let id, let timeout, let mapped):
            "effect #\(id) \(effect) timed out after \(timeout)" + (mapped.map { " -> \($0)" } ?? "")
        case .effectAbandoned(let effect, let id):
            "effect #\(id) \(effect) abandoned: still running when the loop stopped"
        case .effectDropped(let effect, let id):
            "effect #\(id) \(effect) dropped: one with its key is in flight"
        case .sourceFailed(let error):
            "event source failed: \(error)"
        case .sourceFinished:
            "event source finished"
        case .stopping:
            "stopping"
        case .stopped(let report):
            "stopped: \(report)"
        }
    }
}

/// The C library's `write`, under a name the logger's own `write` property does not shadow.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}
