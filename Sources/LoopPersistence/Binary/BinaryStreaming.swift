/// The fast way to ``BinaryCodec``'s form: values are written straight into one buffer in the order
/// `Codable` hands them over, with no tree of nodes in between.
///
/// The tree (``BinaryEncoding``) exists because `Codable` lets an encoder fill its containers in any
/// order: a container may be kept and written to after a later one was taken. Synthesized conformances
/// never do that, and building the tree was most of what an event's encoding cost (an object per
/// container and per nested value, and an array per container, each allocated and freed; see
/// `Docs/Performance.md`). So the stream writes in order, and notices when it is not given things in
/// order: a write through a container or encoder that is no longer the innermost open one, a second
/// value for one slot, a super encoder, nesting past the limit. It then gives up and the tree encodes
/// the value, so every value has exactly the bytes the tree gives it (the tests compare the two).
///
/// A container is its tag, its body's length, its count, then its entries. The length and the count
/// are known only when the container is finished, so one byte is left for each when it opens and the
/// entries are moved along in the rare case either needs more (a body of 128 bytes or more, or 128
/// entries or more).
package enum BinaryStreaming {
    /// The bytes of `value`, or nil when its encoding used its containers out of order or failed (the
    /// tree then encodes it, with the same bytes or the error that names the path).
    package static func bytes<T: Encodable>(of value: T) -> [UInt8]? {
        let stream = Stream()
        do {
            try stream.encode(value)
        } catch {
            return nil
        }
        return stream.outOfOrder || stream.waiting != 0 ? nil : stream.bytes
    }

    /// The buffer being written and the containers still open in it.
    ///
    /// One encoding uses a stream, on one thread, and no access to a property overlaps another (no
    /// method given one of them `inout` touches the stream), so the properties skip the run-time
    /// exclusivity check, which was a sixth of an event's encoding.
    final class Stream {
        @exclusivity(unchecked) var bytes: [UInt8] = []
        /// The open containers, innermost last.
        @exclusivity(unchecked) var frames: [Frame] = []
        /// The coding path of what is being written now.
        @exclusivity(unchecked) var path: [any CodingKey] = []
        /// The encoder whose value is the next thing written, 0 when none is waiting.
        @exclusivity(unchecked) var waiting = 0
        @exclusivity(unchecked) private var lastIdentity = 0
        /// Set once something was used out of order: from then on nothing more is written.
        @exclusivity(unchecked) var outOfOrder = false

        struct Frame {
            /// The container's identity: that of the encoder it belongs to.
            let identity: Int
            /// Where its tag is.
            let start: Int
            /// How long the coding path was where it was opened.
            let depth: Int
            let keyed: Bool
            /// Whether opening it added its key to the path (a nested container's key), taken off when
            /// it closes.
            var keyOnPath = false
            var count = 0
        }

        init() {
            bytes.reserveCapacity(64)
            frames.reserveCapacity(8)
            path.reserveCapacity(8)
        }

        func nextIdentity() -> Int {
            lastIdentity += 1
            return lastIdentity
        }

        /// Encodes `value` as the whole buffer.
        func encode<T: Encodable>(_ value: T) throws {
            try nested(value)
            close(above: 0)
        }

        /// Writes `value` where the buffer ends now: primitives directly, anything else through its
        /// `encode(to:)`, then closes whatever containers it left open.
        func nested<T: Encodable>(_ value: T) throws {
            if let primitive = BinaryEncoding.primitive(value) {
                primitive.write(to: &bytes)
                return
            }
            guard path.count <= BinaryEncoding.Encoder.maximumDepth else {
                outOfOrder = true
                return
            }
            let outer = frames.count
            let identity = nextIdentity()
            waiting = identity
            do {
                try value.encode(to: Encoder(stream: self, identity: identity, depth: path.count))
            } catch {
                // Its entry is written already, and maybe part of it: a caller that catches the error
                // and goes on would keep what the tree never adds. The tree encodes the value instead.
                outOfOrder = true
                throw error
            }
            if waiting == identity {
                // Nothing was written for it: the tree keeps such a value as null.
                bytes.append(BinaryTag.null)
                waiting = 0
            }
            close(above: outer)
        }

        /// Makes the container `identity` the innermost open one, closing those inside it (finished:
        /// a later write to them is out of order). False, and out of order, if it is closed already.
        func bringForward(_ identity: Int) -> Bool {
            guard !outOfOrder, waiting == 0 else { return giveUp() }
            guard let index = frames.lastIndex(where: { $0.identity == identity }) else { return giveUp() }
            close(above: index + 1)
            return true
        }

        /// Marks the stream out of order: the tree encodes the value instead.
        func giveUp() -> Bool {
            outOfOrder = true
            return false
        }

        /// Opens a container for the encoder `identity`, which must be the one waiting for its value
        /// (or have opened the same kind of container already, which it then gets again).
        func open(_ identity: Int, keyed: Bool) -> Bool {
            guard !outOfOrder else { return false }
            if waiting == identity {
                waiting = 0
                frames.append(Frame(identity: identity, start: bytes.count, depth: path.count, keyed: keyed))
                bytes.append(keyed ? BinaryTag.keyed : BinaryTag.unkeyed)
                bytes.append(0)  // the body's length
                bytes.append(0)  // the count
                return true
            }
            guard let index = frames.lastIndex(where: { $0.identity == identity }), frames[index].keyed == keyed
            else { return giveUp() }
            return bringForward(identity)
        }

        /// Writes a single value for the encoder `identity`, which must be waiting for it.
        func single(_ identity: Int, _ node: BinaryEncoding.Node) {
            guard !outOfOrder else { return }
            guard waiting == identity else {
                _ = giveUp()
                return
            }
            waiting = 0
            node.write(to: &bytes)
        }

        /// Starts an entry of the innermost container (brought forward by the caller).
        func entry(key: String?) {
            frames[frames.count - 1].count += 1
            if let key { BinaryEncoding.Node.put(key, &bytes) }
        }

        /// Closes the containers from `level` on, innermost first, writing their lengths and counts.
        func close(above level: Int) {
            while frames.count > level {
                let frame = frames.removeLast()
                if frame.keyOnPath { path.removeLast() }
                let entries = bytes.count - (frame.start + 3)
                let countSize = BinaryTag.varintSize(UInt64(frame.count))
                let body = countSize + entries
                let header = BinaryTag.varintSize(UInt64(body)) + countSize
                if header > 2 {
                    bytes.insert(contentsOf: repeatElement(0, count: header - 2), at: frame.start + 3)
                }
                var at = frame.start + 1
                Self.putVarint(UInt64(body), &bytes, at: &at)
                Self.putVarint(UInt64(frame.count), &bytes, at: &at)
            }
        }

        static func putVarint(_ value: UInt64, _ bytes: inout [UInt8], at index: inout Int) {
            var value = value
            while value >= 0x80 {
                bytes[index] = UInt8(truncatingIfNeeded: value) | 0x80
                index += 1
                value >>= 7
            }
            bytes[index] = UInt8(value)
            index += 1
        }

        /// Writes `value` as the next entry of the container `identity`, under `key`.
        func write<T: Encodable>(_ value: T, key: any CodingKey, keyed: Bool, in identity: Int) throws {
            guard bringForward(identity) else { return }
            entry(key: keyed ? key.stringValue : nil)
            path.append(key)
            defer { path.removeLast() }
            try nested(value)
        }

        /// Writes the primitive `node` as the next entry of the container `identity`.
        func write(_ node: BinaryEncoding.Node, key: String?, in identity: Int) {
            guard bringForward(identity) else { return }
            entry(key: key)
            node.write(to: &bytes)
        }

        /// Opens a container as the next entry of the container `identity`, under `key` (its name in
        /// a keyed container, its index in an unkeyed one): the new container's identity and the length
        /// of its coding path, or nil.
        func nest(keyed: Bool, key: any CodingKey, inKeyed: Bool, in identity: Int) -> (Int, depth: Int)? {
            guard bringForward(identity) else { return nil }
            entry(key: inKeyed ? key.stringValue : nil)
            path.append(key)
            let nested = nextIdentity()
            waiting = nested
            guard open(nested, keyed: keyed) else {
                path.removeLast()
                return nil
            }
            frames[frames.count - 1].keyOnPath = true
            return (nested, path.count)
        }
    }

    /// The encoder of one value: three words, so an `any Encoder` holds it without an allocation.
    struct Encoder: Swift.Encoder {
        let stream: Stream
        let identity: Int
        let depth: Int

        var codingPath: [any CodingKey] { Array(stream.path.prefix(depth)) }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            _ = stream.open(identity, keyed: true)
            return KeyedEncodingContainer(KeyedContainer<Key>(stream: stream, identity: identity, depth: depth))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            _ = stream.open(identity, keyed: false)
            let count = stream.frames.last(where: { $0.identity == identity })?.count ?? 0
            return UnkeyedContainer(stream: stream, identity: identity, count: count)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer {
            SingleContainer(stream: stream, identity: identity, depth: depth)
        }
    }

    struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let stream: Stream
        let identity: Int
        let depth: Int

        var codingPath: [any CodingKey] { Array(stream.path.prefix(depth)) }

        private func put(_ node: BinaryEncoding.Node, _ key: Key) {
            stream.write(node, key: key.stringValue, in: identity)
        }

        mutating func encodeNil(forKey key: Key) { put(.null, key) }
        mutating func encode(_ value: Bool, forKey key: Key) { put(.bool(value), key) }
        mutating func encode(_ value: String, forKey key: Key) { put(.string(value), key) }
        mutating func encode(_ value: Double, forKey key: Key) { put(.double(value), key) }
        mutating func encode(_ value: Float, forKey key: Key) { put(.float(value), key) }
        mutating func encode(_ value: Int, forKey key: Key) { put(.signed(Int64(value)), key) }
        mutating func encode(_ value: Int8, forKey key: Key) { put(.signed(Int64(value)), key) }
        mutating func encode(_ value: Int16, forKey key: Key) { put(.signed(Int64(value)), key) }
        mutating func encode(_ value: Int32, forKey key: Key) { put(.signed(Int64(value)), key) }
        mutating func encode(_ value: Int64, forKey key: Key) { put(.signed(value), key) }
        mutating func encode(_ value: UInt, forKey key: Key) { put(.unsigned(UInt64(value)), key) }
        mutating func encode(_ value: UInt8, forKey key: Key) { put(.unsigned(UInt64(value)), key) }
        mutating func encode(_ value: UInt16, forKey key: Key) { put(.unsigned(UInt64(value)), key) }
        mutating func encode(_ value: UInt32, forKey key: Key) { put(.unsigned(UInt64(value)), key) }
        mutating func encode(_ value: UInt64, forKey key: Key) { put(.unsigned(value), key) }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            try stream.write(value, key: key, keyed: true, in: identity)
        }

        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy keyType: NestedKey.Type,
            forKey key: Key
        ) -> KeyedEncodingContainer<NestedKey> {
            let nested = stream.nest(keyed: true, key: key, inKeyed: true, in: identity)
            return KeyedEncodingContainer(
                KeyedContainer<NestedKey>(stream: stream, identity: nested?.0 ?? -1, depth: nested?.depth ?? depth)
            )
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            let nested = stream.nest(keyed: false, key: key, inKeyed: true, in: identity)
            return UnkeyedContainer(stream: stream, identity: nested?.0 ?? -1, count: 0)
        }

        mutating func superEncoder() -> any Swift.Encoder {
            _ = stream.giveUp()
            return Encoder(stream: stream, identity: -1, depth: depth)
        }

        mutating func superEncoder(forKey key: Key) -> any Swift.Encoder {
            superEncoder()
        }
    }

    struct UnkeyedContainer: UnkeyedEncodingContainer {
        let stream: Stream
        let identity: Int
        /// The count this copy has seen; the open container's own count wins (another copy of it, taken
        /// by asking the encoder again, may have added entries, which the tree's shared count shows).
        private var written: Int

        var count: Int {
            stream.frames.last(where: { $0.identity == identity })?.count ?? written
        }

        init(stream: Stream, identity: Int, count: Int) {
            self.stream = stream
            self.identity = identity
            self.written = count
        }

        var codingPath: [any CodingKey] {
            let depth = stream.frames.last(where: { $0.identity == identity })?.depth ?? stream.path.count
            return Array(stream.path.prefix(depth))
        }

        private mutating func put(_ node: BinaryEncoding.Node) {
            stream.write(node, key: nil, in: identity)
            written = count
        }

        mutating func encodeNil() { put(.null) }
        mutating func encode(_ value: Bool) { put(.bool(value)) }
        mutating func encode(_ value: String) { put(.string(value)) }
        mutating func encode(_ value: Double) { put(.double(value)) }
        mutating func encode(_ value: Float) { put(.float(value)) }
        mutating func encode(_ value: Int) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int8) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int16) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int32) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int64) { put(.signed(value)) }
        mutating func encode(_ value: UInt) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt8) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt16) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt32) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt64) { put(.unsigned(value)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            try stream.write(value, key: IndexKey(count), keyed: false, in: identity)
            written = count
        }

        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy keyType: NestedKey.Type
        ) -> KeyedEncodingContainer<NestedKey> {
            let nested = stream.nest(keyed: true, key: IndexKey(count), inKeyed: false, in: identity)
            written += 1
            return KeyedEncodingContainer(
                KeyedContainer<NestedKey>(stream: stream, identity: nested?.0 ?? -1, depth: nested?.depth ?? 0)
            )
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            let nested = stream.nest(keyed: false, key: IndexKey(count), inKeyed: false, in: identity)
            written += 1
            return UnkeyedContainer(stream: stream, identity: nested?.0 ?? -1, count: 0)
        }

        mutating func superEncoder() -> any Swift.Encoder {
            _ = stream.giveUp()
            return Encoder(stream: stream, identity: -1, depth: stream.path.count)
        }
    }

    struct SingleContainer: SingleValueEncodingContainer {
        let stream: Stream
        let identity: Int
        let depth: Int

        var codingPath: [any CodingKey] { Array(stream.path.prefix(depth)) }

        private func put(_ node: BinaryEncoding.Node) { stream.single(identity, node) }

        mutating func encodeNil() { put(.null) }
        mutating func encode(_ value: Bool) { put(.bool(value)) }
        mutating func encode(_ value: String) { put(.string(value)) }
        mutating func encode(_ value: Double) { put(.double(value)) }
        mutating func encode(_ value: Float) { put(.float(value)) }
        mutating func encode(_ value: Int) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int8) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int16) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int32) { put(.signed(Int64(value))) }
        mutating func encode(_ value: Int64) { put(.signed(value)) }
        mutating func encode(_ value: UInt) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt8) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt16) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt32) { put(.unsigned(UInt64(value))) }
        mutating func encode(_ value: UInt64) { put(.unsigned(value)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            guard !stream.outOfOrder, stream.waiting == identity else {
                _ = stream.giveUp()
                return
            }
            // The value takes this encoder's place: the stream waits for it instead.
            stream.waiting = 0
            try stream.nested(value)
        }
    }
}
