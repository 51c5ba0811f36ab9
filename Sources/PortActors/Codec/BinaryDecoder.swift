import PortMessaging

/// Decodes `Decodable` values from PortActors' binary layout (`BinaryValue`), finding the
/// ports and descriptors they name among the message's components.
struct BinaryDecoder {
    /// What the decoded values' `init(from:)` find in `userInfo`: the attachment table, and
    /// the actor system (made once per decoder, not per value).
    let userInfo: [CodingUserInfoKey: Any]
    /// The received message's ports and descriptors.
    let attachments: AttachmentTable

    init(attachments: AttachmentTable = AttachmentTable(), system: PortActorSystem? = nil) {
        self.attachments = attachments
        userInfo = attachments.userInfo(system: system)
    }

    /// Decodes a `T` from `bytes`, which must hold exactly one value.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        var reader = BinaryReader(bytes)
        let value = try reader.value()
        guard reader.isAtEnd else { throw PortActorError.decoding("\(bytes.count - reader.offset) bytes after the value") }
        return try decode(type, from: value)
    }

    /// Decodes a `T` from a value read already.
    func decode<T: Decodable>(_ type: T.Type, from value: BinaryValue) throws -> T {
        if let primitive = T.self as? any BinaryPrimitive.Type {
            return try primitive.init(binary: value) as! T
        }
        return try T(from: NodeDecoder(value: value, userInfo: userInfo, codingPath: []))
    }
}

/// Decodes `value` as a `T` (a primitive directly, anything else through its `init(from:)`).
private func decodeValue<T: Decodable>(
    _ type: T.Type, _ value: BinaryValue, _ userInfo: [CodingUserInfoKey: Any], _ codingPath: [any CodingKey]
) throws -> T {
    if let primitive = T.self as? any BinaryPrimitive.Type {
        return try primitive.init(binary: value) as! T
    }
    return try T(from: NodeDecoder(value: value, userInfo: userInfo, codingPath: codingPath))
}

private func mismatch(_ expected: String, _ value: BinaryValue, _ codingPath: [any CodingKey]) -> DecodingError {
    .typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.kind)"))
}

struct NodeDecoder: Decoder {
    let value: BinaryValue
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .keyed(let entries) = value else { throw mismatch("a keyed container", value, codingPath) }
        return KeyedDecodingContainer(KeyedNodeDecoder<Key>(entries: entries, userInfo: userInfo, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .unkeyed(let values) = value else { throw mismatch("an unkeyed container", value, codingPath) }
        return UnkeyedNodeDecoder(values: values, userInfo: userInfo, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleNodeDecoder(value: value, userInfo: userInfo, codingPath: codingPath)
    }
}

struct KeyedNodeDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let entries: [(String, BinaryValue)]
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { entries.compactMap { Key(stringValue: $0.0) } }

    func contains(_ key: Key) -> Bool { entries.contains { $0.0 == key.stringValue } }

    private func value(_ key: Key) throws -> BinaryValue {
        let name = key.stringValue
        // Linear: a struct's few keys are found faster so than through a dictionary.
        for (entryKey, value) in entries where entryKey == name { return value }
        throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for '\(name)'"))
    }

    private func primitive<T: BinaryPrimitive>(_ key: Key) throws -> T { try T(binary: value(key)) }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try primitive(key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try primitive(key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try primitive(key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try primitive(key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try primitive(key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try primitive(key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try primitive(key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try primitive(key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try primitive(key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try primitive(key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try primitive(key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try primitive(key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try primitive(key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try primitive(key) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decodeValue(type, value(key), userInfo, codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try NodeDecoder(value: value(key), userInfo: userInfo, codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try NodeDecoder(value: value(key), userInfo: userInfo, codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        NodeDecoder(value: (try? value(Key(stringValue: "super")!)) ?? .null, userInfo: userInfo, codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        NodeDecoder(value: try value(key), userInfo: userInfo, codingPath: codingPath + [key])
    }
}

struct UnkeyedNodeDecoder: UnkeyedDecodingContainer {
    let values: [BinaryValue]
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(values: [BinaryValue], userInfo: [CodingUserInfoKey: Any], codingPath: [any CodingKey]) {
        self.values = values
        self.userInfo = userInfo
        self.codingPath = codingPath
    }

    var count: Int? { values.count }
    var isAtEnd: Bool { currentIndex >= values.count }

    private mutating func next() throws -> BinaryValue {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "the container has no more values"))
        }
        defer { currentIndex += 1 }
        return values[currentIndex]
    }

    private mutating func primitive<T: BinaryPrimitive>() throws -> T { try T(binary: next()) }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, values[currentIndex] == .null else { return false }
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
        try decodeValue(type, next(), userInfo, codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try NodeDecoder(value: next(), userInfo: userInfo, codingPath: codingPath).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try NodeDecoder(value: next(), userInfo: userInfo, codingPath: codingPath).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        NodeDecoder(value: try next(), userInfo: userInfo, codingPath: codingPath)
    }
}

struct SingleNodeDecoder: SingleValueDecodingContainer {
    let value: BinaryValue
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    private func primitive<T: BinaryPrimitive>() throws -> T { try T(binary: value) }

    func decodeNil() -> Bool { value == .null }
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
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(type, value, userInfo, codingPath) }
}
