/// PortActors' binary encoding of `Codable` values: what `BinaryEncoder` writes straight
/// into one byte buffer and `BinaryDecoder` reads straight from the received bytes, with
/// no tree of values in between.
///
/// **The layout.** Each value is one tag byte, then its payload:
///
/// | tag | value | payload |
/// | ---: | --- | --- |
/// | 0 | nil | — |
/// | 1, 2 | false, true | — |
/// | 3 | signed integer | zigzag LEB128 varint |
/// | 4 | unsigned integer | LEB128 varint |
/// | 5 | `Double` | 8 bytes, little-endian IEEE 754 |
/// | 6 | `Float` | 4 bytes, little-endian IEEE 754 |
/// | 7 | string | varint length, UTF-8 |
/// | 8 | bytes (`[UInt8]`) | varint length, the bytes |
/// | 9 | keyed container | varint count, then per entry: varint key length, key UTF-8, value |
/// | 10 | unkeyed container | varint count, then the values |
///
/// Why this layout: integers are varints because most are small (a count, an index, an
/// enum's raw value) and take one byte; every value says its own kind and length, so a
/// keyed container decodes in any order and a reader skips keys it does not know (a field
/// added by a newer peer). Keys are kept as strings, not positions, so that a type's
/// `Codable` stays free to read its keys in another order than it wrote them, or to ask
/// whether one is present. `[UInt8]` is one length-prefixed run, not a container of
/// numbers. Ports and file descriptors never appear in the bytes: they travel as the
/// message's own components, and a value names one by its index there (see
/// `TransferablePort`).
///
/// A container's count comes before its entries although `Codable` never says when a
/// container is finished: the encoder writes a one-byte count when the container opens
/// and fixes it when the container closes, moving what follows only for a container of
/// 128 entries or more (whose count takes more than one byte).
enum BinaryTag: UInt8 {
    case null = 0, falseValue, trueValue, int, uint, double, float, string, bytes, keyed, unkeyed

    /// The kind of value the tag starts, for error messages.
    var kind: String {
        switch self {
        case .null: "nil"
        case .falseValue, .trueValue: "a Bool"
        case .int: "a signed integer"
        case .uint: "an unsigned integer"
        case .double: "a Double"
        case .float: "a Float"
        case .string: "a string"
        case .bytes: "bytes"
        case .keyed: "a keyed container"
        case .unkeyed: "an unkeyed container"
        }
    }
}

extension [UInt8] {
    /// Appends `value` as a LEB128 varint.
    mutating func appendVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        append(UInt8(value))
    }

    /// Appends `value` zigzagged, as a varint.
    mutating func appendZigzag(_ value: Int64) {
        appendVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    /// Appends `value` little-endian, in its full width.
    mutating func appendFixed<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    /// Appends `value` as a varint length and its UTF-8.
    mutating func appendString(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            appendVarint(UInt64(utf8.count))
            append(contentsOf: utf8)
        }
    }

    /// Writes `value` as a varint over the one byte at `offset`, which was set aside for
    /// it: what follows moves only when the varint takes more than that byte.
    mutating func patchVarint(_ value: UInt64, at offset: Int) {
        if value < 0x80 {
            self[offset] = UInt8(value)
            return
        }
        var varint: [UInt8] = []
        varint.appendVarint(value)
        replaceSubrange(offset..<offset + 1, with: varint)
    }
}

/// Reads the layout's values and the envelope's fields from bytes, checking every length
/// against what is left: a truncated or hostile input is a `PortActorError.decoding`,
/// never a crash.
struct BinaryReader {
    let bytes: [UInt8]
    private(set) var offset: Int
    /// Where the bytes this reader may read end.
    let end: Int
    /// How deep containers may nest, so that hostile input cannot exhaust the stack.
    static let maxDepth = 256

    init(_ bytes: [UInt8], offset: Int = 0, end: Int? = nil) {
        self.bytes = bytes
        self.offset = offset
        self.end = end ?? bytes.count
    }

    var isAtEnd: Bool { offset == end }

    mutating func byte() throws(PortActorError) -> UInt8 {
        guard offset < end else { throw .decoding("the data ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws(PortActorError) -> UInt64 {
        // Most varints (tags' lengths and counts, small integers) are one byte.
        if offset < end, bytes[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(bytes[offset])
        }
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try byte()
            guard shift < 64 else { throw .decoding("a varint is too long") }
            result |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
        }
    }

    mutating func zigzag() throws(PortActorError) -> Int64 {
        let zigzag = try varint()
        return Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
    }

    /// A length or a count: no more than the bytes left (every entry takes one at least).
    mutating func count() throws(PortActorError) -> Int {
        let value = try varint()
        guard value <= UInt64(end - offset) else { throw .decoding("a length of \(value) is past the data's end") }
        return Int(value)
    }

    mutating func fixed<T: FixedWidthInteger>(_ type: T.Type) throws(PortActorError) -> T {
        let size = MemoryLayout<T>.size
        guard end - offset >= size else { throw .decoding("the data ends early") }
        var value: T = 0
        for index in 0..<size { value |= T(bytes[offset + index]) << (8 * index) }
        offset += size
        return value
    }

    /// Steps over `count` bytes; the offset they start at.
    mutating func advance(_ count: Int) throws(PortActorError) -> Int {
        guard end - offset >= count else { throw .decoding("the data ends early") }
        defer { offset += count }
        return offset
    }

    mutating func raw(_ count: Int) throws(PortActorError) -> ArraySlice<UInt8> {
        let start = try advance(count)
        return bytes[start..<start + count]
    }

    mutating func string() throws(PortActorError) -> String {
        let length = try count()
        let start = try advance(length)
        return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<start + length]), as: UTF8.self) }
    }

    /// Reads a tag.
    mutating func tag() throws(PortActorError) -> BinaryTag {
        let byte = try byte()
        guard let tag = BinaryTag(rawValue: byte) else { throw .decoding("unknown tag \(byte)") }
        return tag
    }

    /// Whether the `count` bytes at `offset` are the UTF-8 of `key`.
    func matches(_ key: String, at offset: Int, count: Int) -> Bool {
        var key = key
        return key.withUTF8 { utf8 in
            utf8.count == count && bytes.withUnsafeBufferPointer { bytes in
                utf8.elementsEqual(UnsafeBufferPointer(rebasing: bytes[offset..<offset + count]))
            }
        }
    }

    /// Steps over one value, checking its structure.
    mutating func skipValue(depth: Int = 0) throws(PortActorError) {
        guard depth < Self.maxDepth else { throw .decoding("containers nest deeper than \(Self.maxDepth)") }
        switch try tag() {
        case .null, .falseValue, .trueValue: return
        case .int, .uint: _ = try varint()
        case .double: _ = try advance(8)
        case .float: _ = try advance(4)
        case .string, .bytes: _ = try advance(try count())
        case .keyed:
            for _ in 0..<(try count()) {
                _ = try advance(try count())
                try skipValue(depth: depth + 1)
            }
        case .unkeyed:
            for _ in 0..<(try count()) { try skipValue(depth: depth + 1) }
        }
    }
}
