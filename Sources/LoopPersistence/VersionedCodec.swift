/// A codec for a type whose form changes between releases: its bytes say which version of the form
/// they hold, and it reads every earlier version through **upcasters**, one function per step from a
/// version to the next, so a store written by any earlier release still decodes.
///
/// ```swift
/// // Release 1 stored `EventV1` with BinaryCodec; release 2 renamed a case.
/// let events = VersionedCodec(version: 2, codec: BinaryCodec<Event>())
///     .upcasting(VersionedCodec(version: 1, codec: BinaryCodec<EventV1>())) { old in Event(old) }
/// ```
///
/// Version 1 writes the codec's bytes alone, as an unversioned codec does, and bytes without a version
/// are read as version 1: wrapping today's codec as version 1 changes nothing stored. Later versions
/// begin with `0xFE "SV"` and the version (a LEB128 varint), then the codec's bytes; so do version 1's
/// bytes when the codec's own begin that way (``BinaryCodec``'s and JSON never do; a ``PackedCodec``'s
/// or your own codec's may), so they are never mistaken for a later version's. Decoding bytes of a version the codec
/// has no upcaster for, or of a later version than its own, is a ``CodecError`` naming the type and
/// both versions: recovery turns it into a failure naming the stream and the record's version.
public struct VersionedCodec<Value>: EventCodec {
    /// The version of the form this codec writes.
    public let version: UInt32
    private let codec: any EventCodec<Value>
    /// Reads a form of an earlier version, up to `earliest` (`nil`: no earlier form is read).
    private let earlier: (@Sendable (_ version: UInt32, _ bytes: [UInt8]) throws -> Value)?

    /// The marker that begins the bytes of a version after the first (kept outside the generic type,
    /// which cannot store it, so encoding an event does not build it each time).
    static var marker: [UInt8] { versionMarker }

    /// A codec writing version `version` of `Value`'s form with `codec`, and reading no earlier one.
    public init(version: UInt32, codec: some EventCodec<Value>) {
        self.version = max(version, 1)
        self.codec = codec
        self.earlier = nil
    }

    private init(
        version: UInt32,
        codec: any EventCodec<Value>,
        earlier: @escaping @Sendable (UInt32, [UInt8]) throws -> Value
    ) {
        self.version = version
        self.codec = codec
        self.earlier = earlier
    }

    /// This codec, reading the versions `older` reads (all before this one) with it and converting each
    /// value with `step`: the one function from the form before to this one.
    public func upcasting<Older>(
        _ older: VersionedCodec<Older>,
        _ step: @escaping @Sendable (Older) throws -> Value
    ) -> VersionedCodec<Value> {
        VersionedCodec(version: version, codec: codec) { version, bytes in
            try step(try older.decode(version: version, bytes))
        }
    }

    /// The bytes of `value`, in this version's form.
    public func encode(_ value: Value) throws -> [UInt8] {
        let bytes = try codec.encode(value)
        // Version 1 is the codec's bytes alone, unless they begin as the marker does: then they say their
        // version too, so they are not read as a later one.
        guard version > 1 || bytes.starts(with: Self.marker) else { return bytes }
        var tagged = Self.marker
        BinaryTag.putVarint(UInt64(version), &tagged)
        return tagged + bytes
    }

    /// The value `bytes` hold, in whatever version's form they were written, upcast to today's.
    public func decode(_ bytes: [UInt8]) throws -> Value {
        let (written, payload) = try Self.split(bytes)
        return try decode(version: written, payload)
    }

    private func decode(version written: UInt32, _ payload: [UInt8]) throws -> Value {
        if written == version { return try codec.decode(payload) }
        guard written < version else {
            throw CodecError(
                "\(Value.self) in the form of version \(written), later than this release's (version \(version))"
            )
        }
        guard let earlier else {
            throw CodecError(
                "\(Value.self) in the form of version \(written), and this release (version \(version)) has no "
                    + "upcaster from it"
            )
        }
        return try earlier(written, payload)
    }

    /// The version bytes were written in (1 without a marker), and the codec's bytes after it.
    private static func split(_ bytes: [UInt8]) throws -> (UInt32, [UInt8]) {
        guard bytes.starts(with: marker) else { return (1, bytes) }
        var reader = RecordEnvelope.Reader(bytes[marker.count...])
        let version = try reader.varint()
        guard version >= 1, version <= UInt64(UInt32.max) else { throw CodecError("a form version of \(version)") }
        return (UInt32(version), Array(reader.rest))
    }
}

/// ``VersionedCodec``'s marker: `0xFE "SV"`.
private let versionMarker: [UInt8] = [0xFE, 0x53, 0x56]
