#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A Unix signal a service reacts to.
public struct UnixSignal: Hashable, Sendable, CustomStringConvertible {
    /// The signal's number.
    public let rawValue: Int32

    /// Creates the signal numbered `rawValue`.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// `SIGINT`: interrupt, as sent by Ctrl-C.
    public static let interrupt = UnixSignal(rawValue: SIGINT)
    /// `SIGTERM`: the polite request to stop, as sent by service managers and orchestrators.
    public static let terminate = UnixSignal(rawValue: SIGTERM)
    /// `SIGHUP`: hang-up, by convention a request to reload configuration.
    public static let hangup = UnixSignal(rawValue: SIGHUP)

    /// The signal's conventional name, such as `SIGTERM`.
    public var description: String {
        switch rawValue {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        case SIGHUP: "SIGHUP"
        default: "signal \(rawValue)"
        }
    }
}
