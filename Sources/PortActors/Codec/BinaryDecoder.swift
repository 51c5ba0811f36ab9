import Glibc
import PortMessaging

/// Decodes `Decodable` values from PortActors' binary layout (`BinaryTag`), straight from
/// the received bytes, finding the ports and descriptors they name among the message's
/// components.
struct BinaryDecoder {
    /// The received message's ports and descriptors; `nil` for a message that has none.
    let attachments: AttachmentTable?
    /// The system actor references are resolved with (found in `userInfo`).
    let system: PortActorSystem?

    init(attachments: AttachmentTable? = nil, system: PortActorSystem? = nil) {
        self.attachments = attachments
        self.system = system
    }

    /// Decodes a `T` from `bytes`, which must hold exactly one value.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try decode(type, from: bytes, in: 0..<bytes.count)
    }

    /// Decodes a `T` from `range` of `bytes`, which must hold exactly one value.
    ///
    /// The value's structure is checked whole first (lengths, counts, depth), so that a
    /// damaged input is a `PortActorError.decoding` before any `init(from:)` runs.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], in range: Range<Int>) throws -> T {
        guard range.upperBound < Int32.max else { throw PortActorError.decoding("a value of more than 2 GiB") }
        var reader = BinaryReader(bytes, offset: range.lowerBound, end: range.upperBound)
        try reader.skipValue()
        guard reader.isAtEnd else { throw PortActorError.decoding("\(range.upperBound - reader.offset) bytes after the value") }
        if let primitive = primitiveType(T.self) {
            var reader = BinaryReader(bytes, offset: range.lowerBound, end: range.upperBound)
            return try readPrimitive(primitive, as: T.self, from: &reader)
        }
        let source = DecodingSource(bytes: bytes, end: range.upperBound, attachments: attachments, system: system)
        return try T(from: StreamDecoder(source: source, offset: range.lowerBound, depth: 0, codingPath: []))
    }
}

/// The bytes values are decoded from, shared by the decoders and containers of one value.
final class DecodingSource {
    let bytes: [UInt8]
    let end: Int
    let attachments: AttachmentTable?
    let system: PortActorSystem?
    /// What the decoded values' `init(from:)` find: the attachment table (an empty one for
    /// a message with none) and the actor system, made only if a value asks.
    lazy var userInfo: [CodingUserInfoKey: Any] = (attachments ?? AttachmentTable()).userInfo(system: system)

    init(bytes: [UInt8], end: Int, attachments: AttachmentTable?, system: PortActorSystem?) {
        self.bytes = bytes
        self.end = end
        self.attachments = attachments
        self.system = system
    }

    /// A reader at `offset`.
    func reader(at offset: Int) -> BinaryReader {
        BinaryReader(bytes, offset: offset, end: end)
    }

    /// The primitive at `offset`.
    ///
    /// Here rather than in the keyed container, whose code is generic over its key type and
    /// so runs unspecialized: this is specialized for each primitive type where it is called.
    func primitive<T: BinaryPrimitive>(_: T.Type, at offset: Int) throws(PortActorError) -> T {
        var reader = reader(at: offset)
        return try T(from: &reader)
    }

    /// Decodes the value at `offset` as a `T` (a primitive directly, anything else through
    /// its `init(from:)`).
    func decode<T: Decodable>(_ type: T.Type, at offset: Int, depth: Int, codingPath: [any CodingKey]) throws -> T {
        if let primitive = primitiveType(T.self) {
            var reader = reader(at: offset)
            return try readPrimitive(primitive, as: T.self, from: &reader)
        }
        return try T(from: StreamDecoder(source: self, offset: offset, depth: depth, codingPath: codingPath))
    }
}

/// Reads a `P`, the primitive type that `T` is (`primitiveType(_:)`), as a `T`: the same
/// type, so no cast is needed.
func readPrimitive<P: BinaryPrimitive, T>(_: P.Type, as _: T.Type, from reader: inout BinaryReader) throws(PortActorError) -> T {
    unsafeBitCast(try P(from: &reader), to: T.self)
}

private func mismatch(_ expected: String, _ tag: BinaryTag, _ codingPath: [any CodingKey]) -> DecodingError {
    .typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(tag.kind)"))
}

/// The decoder of the value at `offset`.
///
/// Its fields are narrow so that it fits an `any Decoder`'s inline buffer (three words):
/// handing it to `init(from:)` then allocates nothing.
struct StreamDecoder: Decoder {
    let source: DecodingSource
    let codingPath: [any CodingKey]
    private let offset32: Int32
    private let depth16: UInt16

    init(source: DecodingSource, offset: Int, depth: Int, codingPath: [any CodingKey]) {
        self.source = source
        self.codingPath = codingPath
        offset32 = Int32(clamping: offset)
        depth16 = UInt16(clamping: depth)
    }

    var offset: Int { Int(offset32) }
    var depth: Int { Int(depth16) }

    var userInfo: [CodingUserInfoKey: Any] { source.userInfo }

    /// A reader past the value's tag and count, which must be a container of kind `tag`.
    private func container(_ tag: BinaryTag, _ expected: String) throws -> (BinaryReader, count: Int) {
        guard depth < BinaryReader.maxDepth else { throw PortActorError.decoding("containers nest deeper than \(BinaryReader.maxDepth)") }
        var reader = source.reader(at: offset)
        let found = try reader.tag()
        guard found == tag else { throw mismatch(expected, found, codingPath) }
        let count = try reader.count()
        return (reader, count)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        let (reader, count) = try container(.keyed, "a keyed container")
        let entries = try source.keyedEntries(from: reader.offset, count: count, depth: depth + 1)
        return KeyedDecodingContainer(KeyedStreamDecoder<Key>(source: source, entries: entries, depth: depth + 1, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (reader, count) = try container(.unkeyed, "an unkeyed container")
        return UnkeyedStreamDecoder(source: source, count: count, offset: reader.offset, depth: depth + 1, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleStreamDecoder(source: source, offset: offset, depth: depth, codingPath: codingPath)
    }
}

struct KeyedStreamDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let source: DecodingSource
    let entries: KeyedEntries
    let depth: Int
    let codingPath: [any CodingKey]

    var allKeys: [Key] {
        source.keys(of: entries).compactMap { Key(stringValue: $0) }
    }

    func contains(_ key: Key) -> Bool { find(key.stringValue) != nil }

    /// Where the value under `key` starts.
    private func find(_ key: String) -> Int? {
        source.find(key, in: entries)
    }

    private func value(_ key: Key) throws -> Int {
        guard let offset = find(key.stringValue) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for '\(key.stringValue)'"))
        }
        return offset
    }

    private func decoder(_ key: Key) throws -> StreamDecoder {
        StreamDecoder(source: source, offset: try value(key), depth: depth, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { source.bytes[try value(key)] == BinaryTag.null.rawValue }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try source.primitive(type, at: value(key)) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try source.primitive(type, at: value(key)) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try source.primitive(type, at: value(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try source.primitive(type, at: value(key)) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try source.primitive(type, at: value(key)) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try source.primitive(type, at: value(key)) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try source.primitive(type, at: value(key)) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try source.primitive(type, at: value(key)) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try source.primitive(type, at: value(key)) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try source.primitive(type, at: value(key)) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try source.primitive(type, at: value(key)) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try source.primitive(type, at: value(key)) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try source.primitive(type, at: value(key)) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try source.primitive(type, at: value(key)) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try source.decode(type, at: try value(key), depth: depth, codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        // "super" need not be a key of `Key`.
        guard let offset = find("super") else { return StreamDecoder.null(source, codingPath) }
        return StreamDecoder(source: source, offset: offset, depth: depth, codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder { try decoder(key) }
}

extension StreamDecoder {
    /// A decoder of nil (the value of a super decoder that was not encoded).
    static func null(_ source: DecodingSource, _ codingPath: [any CodingKey]) -> StreamDecoder {
        let null = DecodingSource(bytes: [BinaryTag.null.rawValue], end: 1, attachments: source.attachments, system: source.system)
        return StreamDecoder(source: null, offset: 0, depth: 0, codingPath: codingPath)
    }
}

struct UnkeyedStreamDecoder: UnkeyedDecodingContainer {
    let source: DecodingSource
    let count: Int?
    /// Where the next element starts.
    private var offset: Int
    let depth: Int
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(source: DecodingSource, count: Int, offset: Int, depth: Int, codingPath: [any CodingKey]) {
        self.source = source
        self.count = count
        self.offset = offset
        self.depth = depth
        self.codingPath = codingPath
    }

    var isAtEnd: Bool { currentIndex >= count! }

    private func checkNotAtEnd() throws {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "the container has no more values"))
        }
    }

    private mutating func primitive<T: BinaryPrimitive>() throws -> T {
        try checkNotAtEnd()
        var reader = source.reader(at: offset)
        let value = try T(from: &reader)
        offset = reader.offset
        currentIndex += 1
        return value
    }

    /// A decoder of the next element, stepping over it.
    private mutating func next() throws -> StreamDecoder {
        try checkNotAtEnd()
        let decoder = StreamDecoder(source: source, offset: offset, depth: depth, codingPath: codingPath)
        var reader = source.reader(at: offset)
        try reader.skipValue(depth: depth)
        offset = reader.offset
        currentIndex += 1
        return decoder
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, source.bytes[offset] == BinaryTag.null.rawValue else { return false }
        offset += 1
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try primitive() }
    mutating func decode(_ type: String.Type) throws -> String { try primitive() }
    mutating func decode(_ type: Double.Type) throws -> Double { try primitive() }
    mutating func decode(_ type: Float.Type) throws -> Float { try primitive() }
    mutating func decode(_ type: Int.Type) throws -> Int { try primitive() }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try primitive() }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try primitive() }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try primitive() }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try primitive() }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try primitive() }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try primitive() }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try primitive() }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try primitive() }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try primitive() }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let start = offset
        _ = try next()
        return try source.decode(type, at: start, depth: depth, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next().unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { try next() }
}

struct SingleStreamDecoder: SingleValueDecodingContainer {
    let source: DecodingSource
    let offset: Int
    let depth: Int
    let codingPath: [any CodingKey]

    private func primitive<T: BinaryPrimitive>() throws -> T {
        var reader = source.reader(at: offset)
        return try T(from: &reader)
    }

    func decodeNil() -> Bool { source.bytes[offset] == BinaryTag.null.rawValue }
    func decode(_ type: Bool.Type) throws -> Bool { try primitive() }
    func decode(_ type: String.Type) throws -> String { try primitive() }
    func decode(_ type: Double.Type) throws -> Double { try primitive() }
    func decode(_ type: Float.Type) throws -> Float { try primitive() }
    func decode(_ type: Int.Type) throws -> Int { try primitive() }
    func decode(_ type: Int8.Type) throws -> Int8 { try primitive() }
    func decode(_ type: Int16.Type) throws -> Int16 { try primitive() }
    func decode(_ type: Int32.Type) throws -> Int32 { try primitive() }
    func decode(_ type: Int64.Type) throws -> Int64 { try primitive() }
    func decode(_ type: UInt.Type) throws -> UInt { try primitive() }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try primitive() }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try primitive() }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try primitive() }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try primitive() }
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try source.decode(type, at: offset, depth: depth, codingPath: codingPath)
    }
}
