import PortMessaging

/// Encodes `Encodable` values in PortActors' binary layout (`BinaryTag`), straight into
/// one growing byte buffer, setting the ports and descriptors they carry aside as message
/// components.
struct BinaryEncoder {
    /// Where ports and descriptors met while encoding go (a value names one by its index):
    /// made when a value first asks for it, so that the many values that carry none
    /// allocate no table.
    private(set) var attachments: AttachmentTable?
    /// The system whose actors' references are encoded (found in `userInfo`).
    let system: PortActorSystem?

    init(system: PortActorSystem? = nil) {
        self.system = system
    }

    /// The ports and descriptors set aside, in the order met.
    var outgoing: [MessageComponent] { attachments?.outgoing ?? [] }

    /// The bytes of `value`.
    func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        var encoder = self
        var out: [UInt8] = []
        try encoder.encode(value, into: &out)
        return out
    }

    /// Appends the bytes of `value` to `out`.
    mutating func encode<T: Encodable>(_ value: T, into out: inout [UInt8]) throws {
        if let primitive = primitiveType(T.self) {
            return writePrimitive(value, as: primitive, to: &out)
        }
        let stream = EncodingStream(attachments: attachments, system: system)
        swap(&out, &stream.bytes)
        defer {
            swap(&out, &stream.bytes)
            attachments = stream.attachments
        }
        try stream.encodeComposite(value, level: 0, codingPath: [])
        try stream.finish()
    }

    /// Appends the bytes of `value` to `out` after a varint of their length (a one-byte
    /// placeholder fixed once the length is known).
    mutating func encodeLengthPrefixed<T: Encodable>(_ value: T, into out: inout [UInt8]) throws {
        let lengthOffset = out.count
        out.append(0)
        try encode(value, into: &out)
        out.patchVarint(UInt64(out.count - lengthOffset - 1), at: lengthOffset)
    }
}

extension CodingUserInfoKey {
    /// The `AttachmentTable` of the message being encoded or decoded.
    static let portActorAttachments = CodingUserInfoKey(rawValue: "PortActors.attachments")!
}

/// The bytes of one value being encoded, and the containers still open in them.
///
/// Containers are written in the order `Codable` opens them: a container stays open while
/// values go into it or into containers nested in it, and closes (its count fixed) when
/// something is written to a container outside it. Writing to a container that has closed
/// is a misuse the encoding reports, never bytes out of place.
final class EncodingStream {
    /// The bytes written: read and written only by the encoding that owns the stream,
    /// on one thread, so the dynamic exclusivity check of every append is not needed.
    @exclusivity(unchecked) var bytes: [UInt8] = []
    /// The encoding's attachment table, if one was given or a value has asked for it.
    private(set) var attachments: AttachmentTable?
    let system: PortActorSystem?
    /// What the encoded values' `encode(to:)` find: the attachment table (made now if
    /// none was given) and the actor system, made only if a value asks.
    lazy var userInfo: [CodingUserInfoKey: Any] = {
        let table = attachments ?? AttachmentTable()
        attachments = table
        return table.userInfo(system: system)
    }()

    /// The open containers, outermost first: a container at level L is `open[L]`. Used
    /// as `bytes` is, so not checked for exclusive access either.
    @exclusivity(unchecked) private var open = OpenContainers()
    private var lastID = 0
    /// The first misuse met, reported when the encoding ends.
    private var misuse: String?

    init(attachments: AttachmentTable?, system: PortActorSystem?) {
        self.attachments = attachments
        self.system = system
    }

    /// Encodes `value` into a slot at `level`: a primitive at once, anything else through
    /// its `encode(to:)`; nil if that wrote nothing.
    func encode<T: Encodable>(_ value: T, level: Int, codingPath: [any CodingKey]) throws {
        if let primitive = primitiveType(T.self) {
            return writePrimitive(value, as: primitive, to: &bytes)
        }
        try encodeComposite(value, level: level, codingPath: codingPath)
    }

    /// Encodes `value`, known not to be a primitive, through its `encode(to:)`.
    func encodeComposite<T: Encodable>(_ value: T, level: Int, codingPath: [any CodingKey]) throws {
        let start = bytes.count
        // What a slot can address, and what a decoder accepts.
        guard start < Int32.max, level < BinaryReader.maxDepth else {
            let why = "more than 2 GiB, or nested deeper than \(BinaryReader.maxDepth)"
            throw EncodingError.invalidValue(value, .init(codingPath: codingPath, debugDescription: why))
        }
        try value.encode(to: SlotEncoder(stream: self, level: level, start: start, codingPath: codingPath))
        if bytes.count == start { bytes.append(BinaryTag.null.rawValue) }
    }

    /// Closes every container; throws the misuse met, if any.
    func finish() throws {
        close(downTo: 0)
        if let misuse { throw EncodingError.invalidValue(misuse, .init(codingPath: [], debugDescription: misuse)) }
    }

    /// Opens a container of kind `tag` at `level` (closing those deeper than it); its id.
    func openContainer(_ tag: BinaryTag, level: Int) -> Int {
        guard level < BinaryReader.maxDepth else {
            recordMisuse("containers nest deeper than \(BinaryReader.maxDepth)")
            return -1
        }
        close(downTo: level)
        bytes.append(tag.rawValue)
        bytes.append(0)
        lastID += 1
        open.append(OpenContainer(id: lastID, countOffset: bytes.count - 1, count: 0))
        return lastID
    }

    /// The id of the container of kind `tag` that starts at `start` and is open at `level`
    /// (a value that asks its encoder for the same container twice), if there is one.
    func reopen(_ tag: BinaryTag, level: Int, start: Int) -> Int? {
        guard open.count > level, open[level].countOffset == start + 1, bytes[start] == tag.rawValue else { return nil }
        close(downTo: level + 1)
        return open[level].id
    }

    /// Readies the container `id` at `level` for one more entry (closing those opened in
    /// it); false, the misuse recorded, if it has closed.
    func beginEntry(level: Int, id: Int) -> Bool {
        close(downTo: level + 1)
        guard open.count == level + 1, open[level].id == id else {
            recordMisuse("a container was written to after a container outside it")
            return false
        }
        open[level].count += 1
        return true
    }

    /// Readies the keyed container `id` at `level` for one more entry and writes its key;
    /// false if the container has closed.
    func beginEntry(level: Int, id: Int, key: String) -> Bool {
        guard beginEntry(level: level, id: id) else { return false }
        bytes.appendString(key)
        return true
    }

    /// Writes the primitive `value`.
    ///
    /// Here rather than in the containers, whose code is generic (over a key type) and so
    /// runs unspecialized: this is specialized for each primitive type where it is called.
    func write<P: BinaryPrimitive>(_ value: P) {
        value.write(to: &bytes)
    }

    /// Closes the containers at `level` and deeper, fixing their counts.
    func close(downTo level: Int) {
        while open.count > level {
            let container = open.removeLast()
            bytes.patchVarint(container.count, at: container.countOffset)
        }
    }

    func recordMisuse(_ what: String) {
        if misuse == nil { misuse = what }
    }
}

/// The place of one value: an encoder whose value is written at `start`, at `level`.
///
/// Its fields are narrow so that it fits an `any Encoder`'s inline buffer (three words):
/// handing it to `encode(to:)` then allocates nothing.
struct SlotEncoder: Encoder {
    let stream: EncodingStream
    let codingPath: [any CodingKey]
    private let start32: Int32
    private let level16: UInt16
    /// Whether a nil stands at `start` until the value is written (a slot handed out by
    /// `superEncoder()`, which is filled later, if at all).
    var placeholder = false

    init(stream: EncodingStream, level: Int, start: Int, codingPath: [any CodingKey]) {
        self.stream = stream
        self.codingPath = codingPath
        start32 = Int32(clamping: start)
        level16 = UInt16(clamping: level)
    }

    var start: Int { Int(start32) }
    var level: Int { Int(level16) }

    var userInfo: [CodingUserInfoKey: Any] { stream.userInfo }

    /// Readies the slot for its value; false, the misuse recorded, if it has one already.
    func claim() -> Bool {
        stream.close(downTo: level)
        if placeholder, stream.bytes.count == start + 1, stream.bytes[start] == BinaryTag.null.rawValue {
            stream.bytes.removeLast()
        }
        guard stream.bytes.count == start else {
            stream.recordMisuse("a value was encoded twice, or after the values that follow it")
            return false
        }
        return true
    }

    /// The id of the slot's container of kind `tag`: opened now, or the one opened before.
    private func container(_ tag: BinaryTag) -> Int {
        if let id = stream.reopen(tag, level: level, start: start) { return id }
        return claim() ? stream.openContainer(tag, level: level) : -1
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(KeyedStreamEncoder<Key>(stream: stream, level: level, id: container(.keyed), codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        UnkeyedStreamEncoder(stream: stream, level: level, id: container(.unkeyed), codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleStreamEncoder(slot: self)
    }
}

struct KeyedStreamEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let stream: EncodingStream
    let level: Int
    let id: Int
    let codingPath: [any CodingKey]

    /// Writes `key` as the next entry's; false if the container has closed.
    private func entry(_ key: Key) -> Bool {
        entry(named: key.stringValue)
    }

    private func entry(named key: String) -> Bool {
        stream.beginEntry(level: level, id: id, key: key)
    }

    mutating func encodeNil(forKey key: Key) throws { if entry(key) { stream.bytes.append(BinaryTag.null.rawValue) } }
    mutating func encode(_ value: Bool, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: String, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Double, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Float, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Int, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Int8, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Int16, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Int32, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: Int64, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: UInt, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { if entry(key) { stream.write(value) } }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if entry(key) { try stream.encode(value, level: level + 1, codingPath: codingPath + [key]) }
    }

    /// The slot of a new entry under `key` (a slot that writes nothing if the container
    /// has closed).
    private func slot(_ key: Key) -> SlotEncoder {
        slot(named: key.stringValue, codingPath: codingPath + [key])
    }

    private func slot(named key: String, codingPath: [any CodingKey]) -> SlotEncoder {
        let open = entry(named: key)
        return SlotEncoder(stream: stream, level: level + 1, start: open ? stream.bytes.count : -1, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        slot(key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        slot(key).unkeyedContainer()
    }

    /// The slot of the entry "super" (a key `Key` need not have).
    mutating func superEncoder() -> any Encoder {
        placeholder(slot(named: "super", codingPath: codingPath))
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        placeholder(slot(key))
    }

    /// `slot` with a nil standing in it until it is written.
    private func placeholder(_ slot: SlotEncoder) -> SlotEncoder {
        var slot = slot
        if slot.start >= 0 {
            stream.bytes.append(BinaryTag.null.rawValue)
            slot.placeholder = true
        }
        return slot
    }
}

struct UnkeyedStreamEncoder: UnkeyedEncodingContainer, PrimitiveEncodingContainer {
    let stream: EncodingStream
    let level: Int
    let id: Int
    let codingPath: [any CodingKey]
    private(set) var count = 0

    init(stream: EncodingStream, level: Int, id: Int, codingPath: [any CodingKey]) {
        self.stream = stream
        self.level = level
        self.id = id
        self.codingPath = codingPath
    }

    /// Counts the next element; false if the container has closed.
    private mutating func element() -> Bool {
        guard stream.beginEntry(level: level, id: id) else { return false }
        count += 1
        return true
    }

    mutating func primitive(_ value: some BinaryPrimitive) {
        if element() { value.write(to: &stream.bytes) }
    }

    mutating func encodeNil() throws { if element() { stream.bytes.append(BinaryTag.null.rawValue) } }
    mutating func encode<T: Encodable>(_ value: T) throws {
        if element() { try stream.encode(value, level: level + 1, codingPath: codingPath) }
    }

    /// The slot of a new element (one that writes nothing if the container has closed).
    private mutating func slot() -> SlotEncoder {
        let open = element()
        return SlotEncoder(stream: stream, level: level + 1, start: open ? stream.bytes.count : -1, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        slot().container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        slot().unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        var slot = slot()
        if slot.start >= 0 {
            stream.bytes.append(BinaryTag.null.rawValue)
            slot.placeholder = true
        }
        return slot
    }
}

struct SingleStreamEncoder: SingleValueEncodingContainer, PrimitiveEncodingContainer {
    let slot: SlotEncoder
    var codingPath: [any CodingKey] { slot.codingPath }

    func primitive(_ value: some BinaryPrimitive) {
        if slot.claim() { value.write(to: &slot.stream.bytes) }
    }

    mutating func encodeNil() throws { if slot.claim() { slot.stream.bytes.append(BinaryTag.null.rawValue) } }
    mutating func encode<T: Encodable>(_ value: T) throws {
        if slot.claim() { try slot.stream.encode(value, level: slot.level, codingPath: slot.codingPath) }
    }
}
