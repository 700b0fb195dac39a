/// A value with a binary form written by hand: what ``PackedCodec`` stores.
///
/// `Codable` finds a value's fields through containers the standard library builds at run time, once
/// per container, whatever the coder does; that is most of what an event costs to decode with
/// ``BinaryCodec`` (see `Docs/Performance.md`). A packed value writes its fields itself, in order, with
/// no keys and no tags, and reads them back the same way: a few bytes and a few nanoseconds for a
/// typical event. The price is the one every hand-written format has: the order is the format, so a
/// change to it is a change of the stored data (see `Docs/Persistence.md`, "A codec written by hand",
/// for how to evolve one).
///
/// ```swift
/// enum Account: Packable {
///     case deposited(Int)
///     case renamed(String)
///
///     func pack(into packer: inout Packer) {
///         switch self {
///         case .deposited(let amount):
///             packer.pack(case: 0)
///             packer.pack(amount)
///         case .renamed(let name):
///             packer.pack(case: 1)
///             packer.pack(name)
///         }
///     }
///
///     init(unpacking unpacker: inout Unpacker) throws(CodecError) {
///         switch try unpacker.unpackCase() {
///         case 0: self = .deposited(try unpacker.unpack())
///         case 1: self = .renamed(try unpacker.unpack())
///         case let other: throw unpacker.unknownCase(other, of: Account.self)
///         }
///     }
/// }
/// ```
public protocol Packable {
    /// Writes the value's parts into `packer`, in the order ``init(unpacking:)`` reads them.
    func pack(into packer: inout Packer)

    /// Reads a value from `unpacker`, its parts in the order ``pack(into:)`` wrote them; bytes that do not
    /// hold one are a ``CodecError`` (the unpacker's own errors name the byte where reading failed).
    init(unpacking unpacker: inout Unpacker) throws(CodecError)
}

/// A codec for ``Packable`` values: their hand-written form, with nothing around it.
///
/// Decoding checks every length against the bytes left and refuses bytes after the value, so damaged or
/// crafted bytes are a ``CodecError`` that says where, never a trap.
public struct PackedCodec<Value: Packable>: EventCodec {
    /// Creates a codec.
    @inlinable
    public init() {}

    /// The bytes of `value`.
    @inlinable
    public func encode(_ value: Value) -> [UInt8] {
        var packer = Packer()
        value.pack(into: &packer)
        return packer.bytes
    }

    /// The value `bytes` hold.
    @inlinable
    public func decode(_ bytes: [UInt8]) throws(CodecError) -> Value {
        var unpacker = Unpacker(bytes)
        let value: Value
        do {
            value = try Value(unpacking: &unpacker)
        } catch {
            throw CodecError("cannot decode \(Value.self): \(error.description)")
        }
        guard unpacker.isAtEnd else {
            throw CodecError("cannot decode \(Value.self): \(unpacker.remaining) bytes after the value")
        }
        return value
    }
}

/// Where a ``Packable`` value writes its parts: integers as variable-length integers (small ones in one
/// byte), floating-point numbers as their 8 or 4 bytes, strings and byte runs after their length.
public struct Packer: Sendable {
    /// The bytes written so far.
    @inlinable
    public var bytes: [UInt8] { written }

    @usableFromInline
    var written: [UInt8]

    /// An empty packer, with room for a typical event.
    @inlinable
    public init() {
        written = []
        written.reserveCapacity(16)
    }

    /// Writes `value` (through its ``Packable/pack(into:)``).
    @inlinable
    public mutating func pack(_ value: some Packable) {
        value.pack(into: &self)
    }

    /// Writes which case of an enumeration follows (any `Int`, though small ones take one byte); read
    /// back with ``Unpacker/unpackCase()``.
    @inlinable
    public mutating func pack(case index: Int) {
        pack(UInt64(truncatingIfNeeded: index))
    }

    /// Writes `value` as a variable-length integer: 7 bits a byte, low bits first.
    @inlinable
    public mutating func pack(_ value: UInt64) {
        BinaryTag.putVarint(value, &written)
    }

    /// Writes `value` zigzag-encoded (small negative numbers stay small), as a variable-length integer.
    @inlinable
    public mutating func pack(_ value: Int64) {
        pack(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    /// Writes `bytes` after their count, as they are; read them back with ``Unpacker/unpackBytes()``.
    /// (A `[UInt8]` given to `pack(_:)` is an array of numbers instead, each a variable-length integer,
    /// read back with ``Unpacker/unpack(_:)``.)
    @inlinable
    public mutating func pack(bytes more: some Collection<UInt8>) {
        pack(UInt64(more.count))
        written.append(contentsOf: more)
    }

    /// Writes `count` bytes, without their count: for a part of fixed size.
    @inlinable
    mutating func append(_ value: UInt64, count: Int) {
        for index in 0..<count { written.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * index))) }
    }
}

/// Where a ``Packable`` value reads its parts back, in the order they were written.
///
/// Every read checks what is left, and an error says at which byte reading failed and what was expected.
public struct Unpacker: Sendable {
    @usableFromInline
    let bytes: [UInt8]

    /// How far reading has come, in bytes.
    @inlinable
    public var position: Int { offset }

    @usableFromInline
    var offset: Int

    /// How many ``unpack(_:)`` calls are under way, one inside the other.
    @usableFromInline
    var depth = 0

    /// Where the case number ``unpackCase()`` read last began.
    @usableFromInline
    var caseStart = 0

    /// The deepest nesting of ``unpack(_:)`` calls: deeper bytes (damaged, or crafted for a recursive
    /// type) fail instead of exhausting the stack.
    public static let maximumDepth = 512

    /// An unpacker at the start of `bytes`.
    @inlinable
    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
        offset = 0
    }

    /// Whether every byte was read.
    @inlinable
    public var isAtEnd: Bool { position == bytes.count }

    /// How many bytes are left.
    @inlinable
    public var remaining: Int { bytes.count - position }

    /// A value of type `T` (through its ``Packable/init(unpacking:)``), nested at most
    /// ``maximumDepth`` deep: a recursive type's parts read through this, never its initializer
    /// directly, so damaged bytes cannot nest it past the stack.
    @inlinable
    public mutating func unpack<T: Packable>(_ type: T.Type = T.self) throws(CodecError) -> T {
        guard depth < Self.maximumDepth else { throw failure("nesting deeper than \(Self.maximumDepth) levels") }
        depth += 1
        defer { depth -= 1 }
        return try T(unpacking: &self)
    }

    /// Which case of an enumeration follows (what ``Packer/pack(case:)`` wrote).
    @inlinable
    public mutating func unpackCase() throws(CodecError) -> Int {
        caseStart = position
        return Int(truncatingIfNeeded: try unpackVarint())
    }

    /// The error for a case number that `type` does not have, at the first byte of the case number
    /// ``unpackCase()`` read last.
    public func unknownCase(_ index: Int, of type: Any.Type) -> CodecError {
        failure("no case \(index) in \(type)", at: caseStart)
    }

    /// An error saying `what` went wrong, at byte `offset` (where reading is now when `nil`): for a
    /// ``Packable`` type's own checks, so its errors read as the unpacker's do.
    public func failure(_ what: String, at offset: Int? = nil) -> CodecError {
        CodecError("at byte \(offset ?? position) of \(bytes.count): \(what)")
    }

    /// A variable-length integer (what a ``Packer`` wrote for a `UInt64`).
    @inlinable
    public mutating func unpackVarint() throws(CodecError) -> UInt64 {
        // One byte: the common case, a small number.
        if position < bytes.count, bytes[position] < 0x80 {
            defer { offset += 1 }
            return UInt64(bytes[position])
        }
        return try unpackLongVarint()
    }

    @usableFromInline
    mutating func unpackLongVarint() throws(CodecError) -> UInt64 {
        let start = position
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < bytes.count else { throw failure("the bytes end inside a number", at: start) }
            let byte = bytes[position]
            offset += 1
            guard shift < 63 || (shift == 63 && byte <= 1) else {
                throw failure("a number longer than 64 bits", at: start)
            }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 {
                // Each number has one form, so a reader accepts nothing a packer would not write.
                guard byte != 0 else { throw failure("a number written longer than it is", at: start) }
                return value
            }
            shift += 7
        }
    }

    /// A zigzag-encoded integer (what a ``Packer`` wrote for an `Int64`).
    @inlinable
    public mutating func unpackSigned() throws(CodecError) -> Int64 {
        let raw = try unpackVarint()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    /// A count of things that follow, each at least `size` bytes long: refused when the bytes left cannot
    /// hold that many.
    @inlinable
    public mutating func unpackCount(each size: Int = 1) throws(CodecError) -> Int {
        let start = position
        let count = try unpackVarint()
        guard count <= UInt64(remaining / max(size, 1)) else {
            throw failure("a count of \(count) with \(remaining) bytes left", at: start)
        }
        return Int(count)
    }

    /// Bytes written with their count (what ``Packer/pack(bytes:)`` wrote).
    @inlinable
    public mutating func unpackBytes() throws(CodecError) -> ArraySlice<UInt8> {
        let count = try unpackCount()
        defer { offset += count }
        return bytes[position..<position + count]
    }

    /// `count` bytes as a little-endian number: for a part of fixed size.
    @inlinable
    mutating func word(_ count: Int) throws(CodecError) -> UInt64 {
        guard remaining >= count else { throw failure("the bytes end inside a number of \(count) bytes") }
        var value: UInt64 = 0
        for index in 0..<count { value |= UInt64(bytes[position + index]) << UInt64(8 * index) }
        offset += count
        return value
    }
}
