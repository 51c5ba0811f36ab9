import PortMessaging

/// Encodes `Encodable` values in PortActors' binary layout (`BinaryValue`), setting the
/// ports and descriptors they carry aside as message components.
struct BinaryEncoder {
    /// What the encoded values' `encode(to:)` find in `userInfo`: the attachment table, and
    /// the actor system (made once per encoder, not per value).
    let userInfo: [CodingUserInfoKey: Any]
    /// Where ports and descriptors met while encoding go; a value names one by its index.
    let attachments: AttachmentTable

    init(attachments: AttachmentTable = AttachmentTable(), system: PortActorSystem? = nil) {
        self.attachments = attachments
        userInfo = attachments.userInfo(system: system)
    }

    /// The bytes of `value`.
    func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        var out: [UInt8] = []
        try encode(value, into: &out)
        return out
    }

    /// Appends the bytes of `value` to `out`.
    func encode<T: Encodable>(_ value: T, into out: inout [UInt8]) throws {
        if let primitive = value as? any BinaryPrimitive {
            primitive.binaryValue.write(to: &out)
            return
        }
        let node = EncodingNode()
        try value.encode(to: NodeEncoder(node: node, userInfo: userInfo, codingPath: []))
        node.finish().write(to: &out)
    }
}

extension CodingUserInfoKey {
    /// The `AttachmentTable` of the message being encoded or decoded.
    static let portActorAttachments = CodingUserInfoKey(rawValue: "PortActors.attachments")!
}

/// A value being encoded: set once (a primitive), or a container filled as it goes.
final class EncodingNode {
    enum Kind { case unset, value, keyed, unkeyed }
    var kind = Kind.unset
    var value = BinaryValue.null
    var entries: [(String, EncodingNode)] = []
    var elements: [EncodingNode] = []

    func set(_ value: BinaryValue) {
        kind = .value
        self.value = value
    }

    func finish() -> BinaryValue {
        switch kind {
        case .unset: .null
        case .value: value
        case .keyed: .keyed(entries.map { ($0.0, $0.1.finish()) })
        case .unkeyed: .unkeyed(elements.map { $0.finish() })
        }
    }

    /// Encodes `value` into this node.
    func encode<T: Encodable>(_ value: T, userInfo: [CodingUserInfoKey: Any], codingPath: [any CodingKey]) throws {
        if let primitive = value as? any BinaryPrimitive {
            set(primitive.binaryValue)
        } else {
            try value.encode(to: NodeEncoder(node: self, userInfo: userInfo, codingPath: codingPath))
        }
    }
}

struct NodeEncoder: Encoder {
    let node: EncodingNode
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.kind != .keyed {
            node.kind = .keyed
            node.entries = []
        }
        return KeyedEncodingContainer(KeyedNodeEncoder<Key>(node: node, userInfo: userInfo, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.kind != .unkeyed {
            node.kind = .unkeyed
            node.elements = []
        }
        return UnkeyedNodeEncoder(node: node, userInfo: userInfo, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleNodeEncoder(node: node, userInfo: userInfo, codingPath: codingPath)
    }
}

struct KeyedNodeEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    private func child(_ key: Key) -> EncodingNode {
        let child = EncodingNode()
        node.entries.append((key.stringValue, child))
        return child
    }

    mutating func encodeNil(forKey key: Key) throws { child(key).set(.null) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: String, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Double, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Float, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Int, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { child(key).set(value.binaryValue) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try child(key).encode(value, userInfo: userInfo, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: child(key), userInfo: userInfo, codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        NodeEncoder(node: child(key), userInfo: userInfo, codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        NodeEncoder(node: child(Key(stringValue: "super")!), userInfo: userInfo, codingPath: codingPath)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        NodeEncoder(node: child(key), userInfo: userInfo, codingPath: codingPath + [key])
    }
}

struct UnkeyedNodeEncoder: UnkeyedEncodingContainer {
    let node: EncodingNode
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]
    var count: Int { node.elements.count }

    private func child() -> EncodingNode {
        let child = EncodingNode()
        node.elements.append(child)
        return child
    }

    mutating func encodeNil() throws { child().set(.null) }
    mutating func encode(_ value: Bool) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: String) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Double) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Float) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Int) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Int8) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Int16) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Int32) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: Int64) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: UInt) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: UInt8) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: UInt16) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: UInt32) throws { child().set(value.binaryValue) }
    mutating func encode(_ value: UInt64) throws { child().set(value.binaryValue) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try child().encode(value, userInfo: userInfo, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: child(), userInfo: userInfo, codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        NodeEncoder(node: child(), userInfo: userInfo, codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        NodeEncoder(node: child(), userInfo: userInfo, codingPath: codingPath)
    }
}

struct SingleNodeEncoder: SingleValueEncodingContainer {
    let node: EncodingNode
    let userInfo: [CodingUserInfoKey: Any]
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.set(.null) }
    mutating func encode(_ value: Bool) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: String) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Double) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Float) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Int) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Int8) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Int16) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Int32) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: Int64) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: UInt) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: UInt8) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: UInt16) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: UInt32) throws { node.set(value.binaryValue) }
    mutating func encode(_ value: UInt64) throws { node.set(value.binaryValue) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try node.encode(value, userInfo: userInfo, codingPath: codingPath)
    }
}
