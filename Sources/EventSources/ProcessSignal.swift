#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A Unix signal a service reacts to.
///
/// Named apart from swift-service-lifecycle's `UnixSignal`, so a file may import both modules.
public struct ProcessSignal: Hashable, Sendable, CustomStringConvertible {
    /// The signal's number.
    public let rawValue: Int32

    /// Creates the signal numbered `rawValue`.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// `SIGINT`: interrupt, as sent by Ctrl-C.
    public static let interrupt = ProcessSignal(rawValue: SIGINT)
    /// `SIGTERM`: the polite request to stop, as sent by service managers and orchestrators.
    public static let terminate = ProcessSignal(rawValue: SIGTERM)
    /// `SIGHUP`: hang-up, by convention a request to reload configuration.
    public static let hangup = ProcessSignal(rawValue: SIGHUP)
    /// `SIGUSR1`: the first signal left to the application's own use.
    public static let user1 = ProcessSignal(rawValue: SIGUSR1)
    /// `SIGUSR2`: the second signal left to the application's own use.
    public static let user2 = ProcessSignal(rawValue: SIGUSR2)

    /// The signal's conventional name, such as `SIGTERM`.
    public var description: String {
        switch rawValue {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        case SIGHUP: "SIGHUP"
        case SIGUSR1: "SIGUSR1"
        case SIGUSR2: "SIGUSR2"
        default: "signal \(rawValue)"
        }
    }
}
