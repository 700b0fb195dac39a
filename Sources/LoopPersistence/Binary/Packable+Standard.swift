// The standard library's plain values as ``Packable``: integers as variable-length integers (signed ones
// zigzag-encoded), `Bool` as one byte, floating-point numbers as their bits (little-endian), strings as
// UTF-8 after their length, arrays as a count and their elements, optionals as 0 or 1 and the value;
// and a reply address as its request's id.

public import LoopCore

extension Packable where Self: FixedWidthInteger & SignedInteger {
    /// Writes the integer zigzag-encoded, as a variable-length integer.
    @inlinable
    public func pack(into packer: inout Packer) { packer.pack(Int64(self)) }

    /// Reads an integer, refusing one out of range.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        self = try unpacker.unpackInteger()
    }
}

extension Packable where Self: FixedWidthInteger & UnsignedInteger {
    /// Writes the integer as a variable-length integer.
    @inlinable
    public func pack(into packer: inout Packer) { packer.pack(UInt64(self)) }

    /// Reads an integer, refusing one out of range.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        self = try unpacker.unpackUnsigned()
    }
}

extension Int: Packable {}
extension Int64: Packable {}
extension Int32: Packable {}
extension Int16: Packable {}
extension Int8: Packable {}
extension UInt: Packable {}
extension UInt64: Packable {}
extension UInt32: Packable {}
extension UInt16: Packable {}
extension UInt8: Packable {}

extension Bool: Packable {
    /// Writes 1 for true, 0 for false.
    @inlinable
    public func pack(into packer: inout Packer) { packer.pack(UInt64(self ? 1 : 0)) }

    /// Reads a 0 or a 1, refusing any other byte.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        let start = unpacker.position
        switch try unpacker.unpackVarint() {
        case 0: self = false
        case 1: self = true
        case let other: throw unpacker.failure("\(other) where a Bool (0 or 1) was expected", at: start)
        }
    }
}

extension Double: Packable {
    /// Writes the number's 8 bytes, little-endian.
    @inlinable
    public func pack(into packer: inout Packer) { packer.append(bitPattern, count: 8) }

    /// Reads 8 bytes as a number.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        self = Double(bitPattern: try unpacker.word(8))
    }
}

extension Float: Packable {
    /// Writes the number's 4 bytes, little-endian.
    @inlinable
    public func pack(into packer: inout Packer) { packer.append(UInt64(bitPattern), count: 4) }

    /// Reads 4 bytes as a number.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        self = Float(bitPattern: UInt32(truncatingIfNeeded: try unpacker.word(4)))
    }
}

extension String: Packable {
    /// Writes the string's UTF-8 after its length.
    @inlinable
    public func pack(into packer: inout Packer) { packer.pack(bytes: utf8) }

    /// Reads UTF-8 after its length, refusing bytes that are not UTF-8.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        let start = unpacker.position
        let bytes = try unpacker.unpackBytes()
        guard let string = String(validating: bytes, as: UTF8.self) else {
            throw unpacker.failure("a string that is not UTF-8", at: start)
        }
        self = string
    }
}

extension Array: Packable where Element: Packable {
    /// Writes the count, then each element.
    @inlinable
    public func pack(into packer: inout Packer) {
        packer.pack(UInt64(count))
        for element in self { element.pack(into: &packer) }
    }

    /// Reads a count and that many elements. A count larger than the bytes left is refused before
    /// anything is read, so damaged bytes cannot make a reader allocate or loop without end (an
    /// element that packs to no bytes at all cannot be read back in an array for the same reason).
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        let count = try unpacker.unpackCount()
        var elements: [Element] = []
        // Room for the elements the bytes could hold, up to a point: past it the array grows as they
        // come, so a damaged count cannot reserve gigabytes before its first element fails.
        elements.reserveCapacity(Swift.min(count, 4_096))
        for _ in 0..<count { elements.append(try unpacker.unpack(Element.self)) }
        self = elements
    }
}

extension Optional: Packable where Wrapped: Packable {
    /// Writes 0 for nil, or 1 and the value.
    @inlinable
    public func pack(into packer: inout Packer) {
        switch self {
        case .none: packer.pack(UInt64(0))
        case .some(let value):
            packer.pack(UInt64(1))
            value.pack(into: &packer)
        }
    }

    /// Reads a 0 (nil) or a 1 and the value, refusing any other byte.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        let start = unpacker.position
        switch try unpacker.unpackVarint() {
        case 0: self = .none
        case 1: self = .some(try unpacker.unpack(Wrapped.self))
        case let other: throw unpacker.failure("\(other) where an optional's 0 or 1 was expected", at: start)
        }
    }
}

extension Unpacker {
    /// A zigzag-encoded integer that must fit in `T`.
    @inlinable
    mutating func unpackInteger<T: FixedWidthInteger & SignedInteger>() throws(CodecError) -> T {
        let start = position
        let value = try unpackSigned()
        guard let exact = T(exactly: value) else { throw failure("\(value) does not fit in \(T.self)", at: start) }
        return exact
    }

    /// A variable-length integer that must fit in `T`.
    @inlinable
    mutating func unpackUnsigned<T: FixedWidthInteger & UnsignedInteger>() throws(CodecError) -> T {
        let start = position
        let value = try unpackVarint()
        guard let exact = T(exactly: value) else { throw failure("\(value) does not fit in \(T.self)", at: start) }
        return exact
    }
}

extension ReplyTo: Packable {
    /// Writes the request's id, as `Codable` encodes it: a reply address is stored as the stable reference
    /// to its request, never as the live channel behind it.
    @inlinable
    public func pack(into packer: inout Packer) { packer.pack(id) }

    /// Reads a request's id, as an address with no channel, as `Codable` decodes it: an event read back
    /// from a store has no caller waiting on it.
    @inlinable
    public init(unpacking unpacker: inout Unpacker) throws(CodecError) {
        self.init(id: try unpacker.unpackVarint())
    }
}
