public import Tracing

/// A W3C Trace Context `traceparent` header (`00-<trace id>-<parent id>-<flags>`), parsed: the trace a
/// request belongs to and the span that sent it.
public struct TraceParent: Equatable, Sendable {
    /// The trace id: 32 lowercase hexadecimal digits, not all zero.
    public var traceID: String
    /// The caller's span id: 16 lowercase hexadecimal digits, not all zero.
    public var parentID: String
    /// The trace flags (bit 0: sampled).
    public var flags: UInt8

    /// The header parsed, or `nil` if it is not a version-00 `traceparent` (the specification's rule for
    /// a receiver: ignore what does not parse).
    public init?(_ header: String) {
        let parts = header.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "00",
            Self.isHex(parts[1], count: 32), Self.isHex(parts[2], count: 16), Self.isHex(parts[3], count: 2),
            parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" }),
            let flags = UInt8(parts[3], radix: 16)
        else { return nil }
        traceID = String(parts[1])
        parentID = String(parts[2])
        self.flags = flags
    }

    /// The header again.
    public var header: String {
        "00-\(traceID)-\(parentID)-\(String(flags, radix: 16).count == 1 ? "0" : "")\(String(flags, radix: 16))"
    }

    private static func isHex(_ text: Substring, count: Int) -> Bool {
        text.utf8.count == count
            && text.utf8.allSatisfy {
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
            }
    }
}

/// Where a request's ``TraceParent`` is kept in its `ServiceContext`.
enum TraceParentKey: ServiceContextKey {
    typealias Value = TraceParent
}

extension ServiceContext {
    /// The `traceparent` the request came with, if any.
    public var traceParent: TraceParent? {
        get { self[TraceParentKey.self] }
        set { self[TraceParentKey.self] = newValue }
    }
}
