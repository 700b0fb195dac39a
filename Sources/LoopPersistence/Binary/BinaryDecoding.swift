/// Decoding ``BinaryCodec``'s form straight from the bytes: a keyed container indexes its entries once
/// (key bytes and where each value starts) and finds fields by comparing UTF-8, with no tree and no
/// string made per lookup. Every read is bounds-checked and fails with a `DecodingError`.
enum BinaryDecoding {
    /// The deepest nesting decoded: deeper bytes (damaged, or crafted) fail instead of exhausting the
    /// stack.
    static let maximumDepth = 512

    static func checkDepth(_ path: [any CodingKey]) throws {
        guard path.count <= maximumDepth else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: Array(path.prefix(8)), debugDescription: "nesting deeper than \(maximumDepth) levels")
            )
        }
    }

    /// Reads the form at a position.
    struct Reader {
        let bytes: [UInt8]
        var position: Int
        let path: [any CodingKey]

        func damaged(_ what: String) -> DecodingError {
            .dataCorrupted(.init(codingPath: path, debugDescription: what))
        }

        mutating func byte() throws -> UInt8 {
            guard position < bytes.count else { throw damaged("the data ends early") }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func varint() throws -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = try self.byte()
                guard shift < 64, shift < 63 || byte <= 1 else { throw damaged("a number longer than 64 bits") }
                value |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return value }
                shift += 7
            }
        }

        /// A length that must fit in what is left.
        mutating func length() throws -> Int {
            let length = try varint()
            guard length <= UInt64(bytes.count - position) else { throw damaged("a length past the end of the data") }
            return Int(length)
        }

        mutating func word(_ count: Int) throws -> UInt64 {
            guard bytes.count - position >= count else { throw damaged("the data ends early") }
            var value: UInt64 = 0
            for index in 0..<count { value |= UInt64(bytes[position + index]) << UInt64(8 * index) }
            position += count
            return value
        }

        /// Skips the value at the position; returns where it ends.
        mutating func skipValue() throws -> Int {
            switch try byte() {
            case BinaryTag.null, BinaryTag.falseValue, BinaryTag.trueValue: break
            case BinaryTag.signed, BinaryTag.unsigned: _ = try varint()
            case BinaryTag.double: _ = try word(8)
            case BinaryTag.float: _ = try word(4)
            case BinaryTag.string, BinaryTag.keyed, BinaryTag.unkeyed: position += try length()
            case let tag: throw damaged("an unknown tag \(tag)")
            }
            return position
        }
    }

    final class Decoder: Swift.Decoder {
        let bytes: [UInt8]
        let offset: Int
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        init(bytes: [UInt8], offset: Int, path: [any CodingKey]) {
            self.bytes = bytes
            self.offset = offset
            self.codingPath = path
        }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            try checkDepth(codingPath)
            return KeyedDecodingContainer(try KeyedContainer<Key>(bytes: bytes, offset: offset, path: codingPath))
        }

        func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try checkDepth(codingPath)
            return try UnkeyedContainer(bytes: bytes, offset: offset, path: codingPath)
        }

        func singleValueContainer() throws -> any SingleValueDecodingContainer {
            SingleContainer(value: Value(bytes: bytes, offset: offset, path: codingPath))
        }
    }

    /// One value, decoded on demand as the type asks.
    struct Value {
        let bytes: [UInt8]
        let offset: Int
        let path: [any CodingKey]

        var tag: UInt8? { offset < bytes.count ? bytes[offset] : nil }
        var isNil: Bool { tag == BinaryTag.null }

        func mismatch(_ type: Any.Type) -> DecodingError {
            let found = tag.map(BinaryTag.name) ?? "the end of the data"
            if tag == BinaryTag.null {
                return .valueNotFound(type, .init(codingPath: path, debugDescription: "found null"))
            }
            return .typeMismatch(type, .init(codingPath: path, debugDescription: "found \(found)"))
        }

        func bool() throws -> Bool {
            switch tag {
            case BinaryTag.trueValue: true
            case BinaryTag.falseValue: false
            default: throw mismatch(Bool.self)
            }
        }

        func string() throws -> String {
            guard tag == BinaryTag.string else { throw mismatch(String.self) }
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            let length = try reader.length()
            return String(decoding: bytes[reader.position..<(reader.position + length)], as: UTF8.self)
        }

        func double() throws -> Double {
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            switch tag {
            case BinaryTag.double: return Double(bitPattern: try reader.word(8))
            case BinaryTag.float: return Double(Float(bitPattern: UInt32(try reader.word(4))))
            case BinaryTag.signed, BinaryTag.unsigned: return Double(try integer(Int64.self))
            default: throw mismatch(Double.self)
            }
        }

        func float() throws -> Float {
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            switch tag {
            case BinaryTag.float: return Float(bitPattern: UInt32(try reader.word(4)))
            case BinaryTag.double: return Float(Double(bitPattern: try reader.word(8)))
            default: throw mismatch(Float.self)
            }
        }

        func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            switch tag {
            case BinaryTag.signed:
                let raw = try reader.varint()
                let value = Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
                guard let exact = T(exactly: value) else { throw reader.damaged("\(value) does not fit in \(T.self)") }
                return exact
            case BinaryTag.unsigned:
                let value = try reader.varint()
                guard let exact = T(exactly: value) else { throw reader.damaged("\(value) does not fit in \(T.self)") }
                return exact
            default:
                throw mismatch(T.self)
            }
        }

        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            // The commonest leaves, without a decoder for each.
            if T.self == String.self, let value = try string() as? T { return value }
            if T.self == Int.self, let value = try integer(Int.self) as? T { return value }
            if T.self == Bool.self, let value = try bool() as? T { return value }
            try checkDepth(path)
            return try T(from: Decoder(bytes: bytes, offset: offset, path: path))
        }
    }

    struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let bytes: [UInt8]
        let codingPath: [any CodingKey]
        /// Each entry's key (start and length of its UTF-8) and where its value starts.
        let entries: [(key: Range<Int>, value: Int)]
        /// Where each key's value starts, for a container large enough that scanning for every key
        /// would cost time quadratic in its size (a dictionary decodes by asking for each of its keys).
        let index: [String: Int]?

        /// Containers up to this many entries are scanned; larger ones are indexed once.
        static var scanLimit: Int { 16 }

        init(bytes: [UInt8], offset: Int, path: [any CodingKey]) throws {
            self.bytes = bytes
            self.codingPath = path
            let value = Value(bytes: bytes, offset: offset, path: path)
            guard value.tag == BinaryTag.keyed else { throw value.mismatch([String: Any].self) }
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            let length = try reader.length()
            let end = reader.position + length
            let count = try reader.varint()
            guard reader.position <= end, count <= UInt64(end - reader.position) else {
                throw reader.damaged("more entries than bytes")
            }
            var entries: [(key: Range<Int>, value: Int)] = []
            entries.reserveCapacity(Int(count))
            for _ in 0..<count {
                let length = try reader.length()
                let key = reader.position..<(reader.position + length)
                reader.position += length
                entries.append((key, reader.position))
                _ = try reader.skipValue()
                guard reader.position <= end else { throw reader.damaged("an entry runs past its container") }
            }
            guard reader.position == end else {
                throw reader.damaged("a container's length does not match its entries")
            }
            self.entries = entries
            if entries.count > Self.scanLimit {
                var index: [String: Int] = [:]
                index.reserveCapacity(entries.count)
                for entry in entries {
                    // The first of repeated keys wins, as a scan would find it.
                    let name = String(decoding: bytes[entry.key], as: UTF8.self)
                    if index[name] == nil { index[name] = entry.value }
                }
                self.index = index
            } else {
                self.index = nil
            }
        }

        var allKeys: [Key] {
            var keys: [Key] = []
            keys.reserveCapacity(entries.count)
            for entry in entries {
                if let key = Key(stringValue: String(decoding: bytes[entry.key], as: UTF8.self)) { keys.append(key) }
            }
            return keys
        }

        func find(_ key: Key) -> Int? {
            if let index { return index[key.stringValue] }
            return find(name: key.stringValue)
        }

        func find(name: String) -> Int? {
            var name = name
            return name.withUTF8 { utf8 in
                entries.first { entry in
                    entry.key.count == utf8.count && bytes[entry.key].elementsEqual(utf8)
                }?.value
            }
        }

        func value(_ key: Key) throws -> Value {
            guard let offset = find(key) else {
                throw DecodingError.keyNotFound(
                    key,
                    .init(codingPath: codingPath, debugDescription: "no value for '\(key.stringValue)'")
                )
            }
            return Value(bytes: bytes, offset: offset, path: codingPath + [key])
        }

        func contains(_ key: Key) -> Bool { find(key) != nil }
        func decodeNil(forKey key: Key) throws -> Bool { try value(key).isNil }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(key).bool() }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(key).string() }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(key).double() }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(key).float() }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(key).integer(type) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(key).integer(type) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(key).integer(type) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(key).integer(type) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(key).integer(type) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(key).integer(type) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(key).integer(type) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(key).integer(type) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(key).integer(type) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(key).integer(type) }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(key).decode(type) }

        func nestedContainer<NestedKey: CodingKey>(
            keyedBy type: NestedKey.Type,
            forKey key: Key
        ) throws -> KeyedDecodingContainer<NestedKey> {
            let value = try value(key)
            return KeyedDecodingContainer(
                try KeyedContainer<NestedKey>(bytes: bytes, offset: value.offset, path: value.path)
            )
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            let value = try value(key)
            return try UnkeyedContainer(bytes: bytes, offset: value.offset, path: value.path)
        }

        func superDecoder() throws -> any Swift.Decoder {
            // "super" is the encoder's own key: the type's coding keys need not have it.
            guard let offset = find(name: "super") else {
                throw DecodingError.keyNotFound(
                    SuperKey(),
                    .init(codingPath: codingPath, debugDescription: "no value for 'super'")
                )
            }
            return Decoder(bytes: bytes, offset: offset, path: codingPath + [SuperKey()])
        }

        func superDecoder(forKey key: Key) throws -> any Swift.Decoder {
            let value = try value(key)
            return Decoder(bytes: bytes, offset: value.offset, path: value.path)
        }
    }

    struct UnkeyedContainer: UnkeyedDecodingContainer {
        let bytes: [UInt8]
        let codingPath: [any CodingKey]
        let count: Int?
        let end: Int
        var currentIndex = 0
        var position: Int

        init(bytes: [UInt8], offset: Int, path: [any CodingKey]) throws {
            self.bytes = bytes
            self.codingPath = path
            let value = Value(bytes: bytes, offset: offset, path: path)
            guard value.tag == BinaryTag.unkeyed else { throw value.mismatch([Any].self) }
            var reader = Reader(bytes: bytes, position: offset + 1, path: path)
            let length = try reader.length()
            end = reader.position + length
            let count = try reader.varint()
            guard reader.position <= end, count <= UInt64(end - reader.position) else {
                throw reader.damaged("more elements than bytes")
            }
            self.count = Int(count)
            position = reader.position
        }

        var isAtEnd: Bool { currentIndex >= (count ?? 0) }

        /// The next element, and moves past it.
        mutating func next() throws -> Value {
            let path = codingPath + [IndexKey(currentIndex)]
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(
                    Any.self,
                    .init(
                        codingPath: path,
                        debugDescription: "no element \(currentIndex): the container has \(count ?? 0)"
                    )
                )
            }
            var reader = Reader(bytes: bytes, position: position, path: path)
            let start = position
            position = try reader.skipValue()
            guard position <= end else { throw reader.damaged("an element runs past its container") }
            currentIndex += 1
            return Value(bytes: bytes, offset: start, path: path)
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd, position < bytes.count, bytes[position] == BinaryTag.null else { return false }
            _ = try next()
            return true
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try next().bool() }
        mutating func decode(_ type: String.Type) throws -> String { try next().string() }
        mutating func decode(_ type: Double.Type) throws -> Double { try next().double() }
        mutating func decode(_ type: Float.Type) throws -> Float { try next().float() }
        mutating func decode(_ type: Int.Type) throws -> Int { try next().integer(type) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try next().integer(type) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try next().integer(type) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try next().integer(type) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try next().integer(type) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try next().integer(type) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next().integer(type) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next().integer(type) }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next().integer(type) }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next().integer(type) }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(type) }

        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy type: NestedKey.Type
        ) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            let value = try next()
            return KeyedDecodingContainer(
                try KeyedContainer<NestedKey>(bytes: bytes, offset: value.offset, path: value.path)
            )
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let value = try next()
            return try UnkeyedContainer(bytes: bytes, offset: value.offset, path: value.path)
        }

        mutating func superDecoder() throws -> any Swift.Decoder {
            let value = try next()
            return Decoder(bytes: bytes, offset: value.offset, path: value.path)
        }
    }

    struct SingleContainer: SingleValueDecodingContainer {
        let value: Value
        var codingPath: [any CodingKey] { value.path }

        func decodeNil() -> Bool { value.isNil }
        func decode(_ type: Bool.Type) throws -> Bool { try value.bool() }
        func decode(_ type: String.Type) throws -> String { try value.string() }
        func decode(_ type: Double.Type) throws -> Double { try value.double() }
        func decode(_ type: Float.Type) throws -> Float { try value.float() }
        func decode(_ type: Int.Type) throws -> Int { try value.integer(type) }
        func decode(_ type: Int8.Type) throws -> Int8 { try value.integer(type) }
        func decode(_ type: Int16.Type) throws -> Int16 { try value.integer(type) }
        func decode(_ type: Int32.Type) throws -> Int32 { try value.integer(type) }
        func decode(_ type: Int64.Type) throws -> Int64 { try value.integer(type) }
        func decode(_ type: UInt.Type) throws -> UInt { try value.integer(type) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try value.integer(type) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try value.integer(type) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try value.integer(type) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try value.integer(type) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try value.decode(type) }
    }
}
