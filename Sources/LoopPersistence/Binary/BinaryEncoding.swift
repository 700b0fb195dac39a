/// Encoding to ``BinaryCodec``'s form: containers build a small tree (so they may be filled in any
/// order, as `Codable` allows), written out at the end in one pass.
enum BinaryEncoding {
    /// One encoded value.
    enum Node {
        case null
        case bool(Bool)
        case signed(Int64)
        case unsigned(UInt64)
        case double(Double)
        case float(Float)
        case string(String)
        case keyed(Keyed)
        case unkeyed(Unkeyed)
        /// A value still to be filled in (by a nested or super encoder).
        case slot(Slot)

        /// How many bytes ``write(to:)`` appends. A container's size is worked out once and kept, so
        /// writing a tree costs one pass over it, with no buffer of its own per container.
        var size: Int {
            switch self {
            case .null, .bool: 1
            case .signed(let value): 1 + BinaryTag.varintSize(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
            case .unsigned(let value): 1 + BinaryTag.varintSize(value)
            case .double: 9
            case .float: 5
            case .string(let value):
                1 + BinaryTag.varintSize(UInt64(value.utf8.count)) + value.utf8.count
            case .keyed(let keyed):
                1 + BinaryTag.varintSize(UInt64(keyed.bodySize)) + keyed.bodySize
            case .unkeyed(let unkeyed):
                1 + BinaryTag.varintSize(UInt64(unkeyed.bodySize)) + unkeyed.bodySize
            case .slot(let slot): slot.node.size
            }
        }

        func write(to bytes: inout [UInt8]) {
            switch self {
            case .null: bytes.append(BinaryTag.null)
            case .bool(let value): bytes.append(value ? BinaryTag.trueValue : BinaryTag.falseValue)
            case .signed(let value):
                bytes.append(BinaryTag.signed)
                BinaryTag.putVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)), &bytes)
            case .unsigned(let value):
                bytes.append(BinaryTag.unsigned)
                BinaryTag.putVarint(value, &bytes)
            case .double(let value):
                bytes.append(BinaryTag.double)
                withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes += $0 }
            case .float(let value):
                bytes.append(BinaryTag.float)
                withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes += $0 }
            case .string(let value):
                bytes.append(BinaryTag.string)
                Self.put(value, &bytes)
            case .keyed(let keyed):
                bytes.append(BinaryTag.keyed)
                BinaryTag.putVarint(UInt64(keyed.bodySize), &bytes)
                BinaryTag.putVarint(UInt64(keyed.entries.count), &bytes)
                for (key, node) in keyed.entries {
                    Self.put(key, &bytes)
                    node.write(to: &bytes)
                }
            case .unkeyed(let unkeyed):
                bytes.append(BinaryTag.unkeyed)
                BinaryTag.putVarint(UInt64(unkeyed.bodySize), &bytes)
                BinaryTag.putVarint(UInt64(unkeyed.items.count), &bytes)
                for node in unkeyed.items { node.write(to: &bytes) }
            case .slot(let slot):
                slot.node.write(to: &bytes)
            }
        }

        /// `text`'s length, then its UTF-8 bytes.
        static func put(_ text: String, _ bytes: inout [UInt8]) {
            var text = text
            text.withUTF8 { utf8 in
                BinaryTag.putVarint(UInt64(utf8.count), &bytes)
                bytes += utf8
            }
        }
    }

    final class Keyed {
        var entries: [(String, Node)] = []
        private var measured: Int?

        /// The bytes of the entries, with their count before them. Measured when the tree is written,
        /// once it is complete.
        var bodySize: Int {
            if let measured { return measured }
            var size = BinaryTag.varintSize(UInt64(entries.count))
            for (key, node) in entries {
                let length = key.utf8.count
                size += BinaryTag.varintSize(UInt64(length)) + length + node.size
            }
            measured = size
            return size
        }
    }

    final class Unkeyed {
        var items: [Node] = []
        private var measured: Int?

        /// The bytes of the items, with their count before them (see ``Keyed/bodySize``).
        var bodySize: Int {
            if let measured { return measured }
            var size = BinaryTag.varintSize(UInt64(items.count))
            for node in items { size += node.size }
            measured = size
            return size
        }
    }

    final class Slot {
        var node: Node = .null
    }

    /// Encodes one value into its slot.
    final class Encoder: Swift.Encoder {
        let slot: Slot
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        init(path: [any CodingKey], slot: Slot = Slot()) {
            self.codingPath = path
            self.slot = slot
        }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            let keyed: Keyed
            if case .keyed(let existing) = slot.node {
                keyed = existing
            } else {
                keyed = Keyed()
                slot.node = .keyed(keyed)
            }
            return KeyedEncodingContainer(KeyedContainer<Key>(keyed: keyed, codingPath: codingPath))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            let unkeyed: Unkeyed
            if case .unkeyed(let existing) = slot.node {
                unkeyed = existing
            } else {
                unkeyed = Unkeyed()
                slot.node = .unkeyed(unkeyed)
            }
            return UnkeyedContainer(unkeyed: unkeyed, codingPath: codingPath)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer {
            SingleContainer(slot: slot, codingPath: codingPath)
        }

        /// The deepest nesting encoded: a deeper value fails rather than exhausting the stack (and the
        /// decoder refuses what is deeper than its own limit, the same).
        static var maximumDepth: Int { BinaryDecoding.maximumDepth }

        /// The node of `value`: primitives directly, anything else through its `encode(to:)`.
        static func node<T: Encodable>(of value: T, at path: [any CodingKey]) throws -> Node {
            // Compared as types, not cast: a failed dynamic cast per primitive is most of an event's cost.
            if let primitive = primitive(value) { return primitive }
            guard path.count <= maximumDepth else {
                throw EncodingError.invalidValue(
                    value,
                    .init(
                        codingPath: Array(path.prefix(8)),
                        debugDescription: "nesting deeper than \(maximumDepth) levels"
                    )
                )
            }
            let encoder = Encoder(path: path)
            try value.encode(to: encoder)
            return encoder.slot.node
        }
    }

    /// `value`'s node if it is one of the primitives containers take directly.
    @inline(__always)
    static func primitive<T>(_ value: T) -> Node? {
        if T.self == String.self { return .string(unsafeBitCast(value, to: String.self)) }
        if T.self == Int.self { return .signed(Int64(unsafeBitCast(value, to: Int.self))) }
        if T.self == UInt64.self { return .unsigned(unsafeBitCast(value, to: UInt64.self)) }
        if T.self == Bool.self { return .bool(unsafeBitCast(value, to: Bool.self)) }
        if T.self == Double.self { return .double(unsafeBitCast(value, to: Double.self)) }
        if T.self == Int64.self { return .signed(unsafeBitCast(value, to: Int64.self)) }
        return nil
    }

    struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let keyed: Keyed
        let codingPath: [any CodingKey]

        mutating func encodeNil(forKey key: Key) { keyed.entries.append((key.stringValue, .null)) }
        mutating func encode(_ value: Bool, forKey key: Key) { keyed.entries.append((key.stringValue, .bool(value))) }
        mutating func encode(_ value: String, forKey key: Key) {
            keyed.entries.append((key.stringValue, .string(value)))
        }
        mutating func encode(_ value: Double, forKey key: Key) {
            keyed.entries.append((key.stringValue, .double(value)))
        }
        mutating func encode(_ value: Float, forKey key: Key) { keyed.entries.append((key.stringValue, .float(value))) }
        mutating func encode(_ value: Int, forKey key: Key) { signed(Int64(value), key) }
        mutating func encode(_ value: Int8, forKey key: Key) { signed(Int64(value), key) }
        mutating func encode(_ value: Int16, forKey key: Key) { signed(Int64(value), key) }
        mutating func encode(_ value: Int32, forKey key: Key) { signed(Int64(value), key) }
        mutating func encode(_ value: Int64, forKey key: Key) { signed(value, key) }
        mutating func encode(_ value: UInt, forKey key: Key) { unsigned(UInt64(value), key) }
        mutating func encode(_ value: UInt8, forKey key: Key) { unsigned(UInt64(value), key) }
        mutating func encode(_ value: UInt16, forKey key: Key) { unsigned(UInt64(value), key) }
        mutating func encode(_ value: UInt32, forKey key: Key) { unsigned(UInt64(value), key) }
        mutating func encode(_ value: UInt64, forKey key: Key) { unsigned(value, key) }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            keyed.entries.append((key.stringValue, try Encoder.node(of: value, at: codingPath + [key])))
        }

        private func signed(_ value: Int64, _ key: Key) { keyed.entries.append((key.stringValue, .signed(value))) }
        private func unsigned(_ value: UInt64, _ key: Key) { keyed.entries.append((key.stringValue, .unsigned(value))) }

        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy keyType: NestedKey.Type,
            forKey key: Key
        ) -> KeyedEncodingContainer<NestedKey> {
            let nested = Keyed()
            keyed.entries.append((key.stringValue, .keyed(nested)))
            return KeyedEncodingContainer(KeyedContainer<NestedKey>(keyed: nested, codingPath: codingPath + [key]))
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            let nested = Unkeyed()
            keyed.entries.append((key.stringValue, .unkeyed(nested)))
            return UnkeyedContainer(unkeyed: nested, codingPath: codingPath + [key])
        }

        mutating func superEncoder() -> any Swift.Encoder {
            superEncoder(SuperKey())
        }

        mutating func superEncoder(forKey key: Key) -> any Swift.Encoder {
            superEncoder(key)
        }

        private func superEncoder(_ key: any CodingKey) -> any Swift.Encoder {
            let slot = Slot()
            keyed.entries.append((key.stringValue, .slot(slot)))
            return Encoder(path: codingPath + [key], slot: slot)
        }
    }

    struct UnkeyedContainer: UnkeyedEncodingContainer {
        let unkeyed: Unkeyed
        let codingPath: [any CodingKey]
        var count: Int { unkeyed.items.count }

        mutating func encodeNil() { unkeyed.items.append(.null) }
        mutating func encode(_ value: Bool) { unkeyed.items.append(.bool(value)) }
        mutating func encode(_ value: String) { unkeyed.items.append(.string(value)) }
        mutating func encode(_ value: Double) { unkeyed.items.append(.double(value)) }
        mutating func encode(_ value: Float) { unkeyed.items.append(.float(value)) }
        mutating func encode(_ value: Int) { unkeyed.items.append(.signed(Int64(value))) }
        mutating func encode(_ value: Int8) { unkeyed.items.append(.signed(Int64(value))) }
        mutating func encode(_ value: Int16) { unkeyed.items.append(.signed(Int64(value))) }
        mutating func encode(_ value: Int32) { unkeyed.items.append(.signed(Int64(value))) }
        mutating func encode(_ value: Int64) { unkeyed.items.append(.signed(value)) }
        mutating func encode(_ value: UInt) { unkeyed.items.append(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt8) { unkeyed.items.append(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt16) { unkeyed.items.append(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt32) { unkeyed.items.append(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt64) { unkeyed.items.append(.unsigned(value)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            unkeyed.items.append(try Encoder.node(of: value, at: codingPath + [IndexKey(count)]))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy keyType: NestedKey.Type
        )
            -> KeyedEncodingContainer<NestedKey>
        {
            let nested = Keyed()
            let path = codingPath + [IndexKey(count)]
            unkeyed.items.append(.keyed(nested))
            return KeyedEncodingContainer(KeyedContainer<NestedKey>(keyed: nested, codingPath: path))
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            let nested = Unkeyed()
            let path = codingPath + [IndexKey(count)]
            unkeyed.items.append(.unkeyed(nested))
            return UnkeyedContainer(unkeyed: nested, codingPath: path)
        }

        mutating func superEncoder() -> any Swift.Encoder {
            let slot = Slot()
            let path = codingPath + [IndexKey(count)]
            unkeyed.items.append(.slot(slot))
            return Encoder(path: path, slot: slot)
        }
    }

    struct SingleContainer: SingleValueEncodingContainer {
        let slot: Slot
        let codingPath: [any CodingKey]

        mutating func encodeNil() { slot.node = .null }
        mutating func encode(_ value: Bool) { slot.node = .bool(value) }
        mutating func encode(_ value: String) { slot.node = .string(value) }
        mutating func encode(_ value: Double) { slot.node = .double(value) }
        mutating func encode(_ value: Float) { slot.node = .float(value) }
        mutating func encode(_ value: Int) { slot.node = .signed(Int64(value)) }
        mutating func encode(_ value: Int8) { slot.node = .signed(Int64(value)) }
        mutating func encode(_ value: Int16) { slot.node = .signed(Int64(value)) }
        mutating func encode(_ value: Int32) { slot.node = .signed(Int64(value)) }
        mutating func encode(_ value: Int64) { slot.node = .signed(value) }
        mutating func encode(_ value: UInt) { slot.node = .unsigned(UInt64(value)) }
        mutating func encode(_ value: UInt8) { slot.node = .unsigned(UInt64(value)) }
        mutating func encode(_ value: UInt16) { slot.node = .unsigned(UInt64(value)) }
        mutating func encode(_ value: UInt32) { slot.node = .unsigned(UInt64(value)) }
        mutating func encode(_ value: UInt64) { slot.node = .unsigned(value) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            slot.node = try Encoder.node(of: value, at: codingPath)
        }
    }
}

/// The key the binary form keeps a superclass's part under.
struct SuperKey: CodingKey {
    var stringValue: String { "super" }
    var intValue: Int? { nil }

    init() {}
    init?(stringValue: String) {
        guard stringValue == "super" else { return nil }
    }
    init?(intValue: Int) { nil }
}

/// The key of an element of an unkeyed container, for coding paths.
struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { intValue.map(String.init) ?? "" }

    init(_ index: Int) { intValue = index }
    init?(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}
