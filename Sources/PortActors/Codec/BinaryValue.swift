/// A value of PortActors' binary encoding, as a tree: what `BinaryEncoder` builds and
/// writes, and what `BinaryDecoder` reads back before it decodes.
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
indirect enum BinaryValue: Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case float(Float)
    case string(String)
    case bytes([UInt8])
    case keyed([(String, BinaryValue)])
    case unkeyed([BinaryValue])

    static func == (lhs: BinaryValue, rhs: BinaryValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.uint(let a), .uint(let b)): a == b
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern
        case (.float(let a), .float(let b)): a.bitPattern == b.bitPattern
        case (.string(let a), .string(let b)): a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.keyed(let a), .keyed(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.unkeyed(let a), .unkeyed(let b)): a == b
        default: false
        }
    }

    enum Tag: UInt8 {
        case null = 0, falseValue, trueValue, int, uint, double, float, string, bytes, keyed, unkeyed
    }

    /// The value's kind, for error messages.
    var kind: String {
        switch self {
        case .null: "nil"
        case .bool: "a Bool"
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

    // MARK: Writing

    /// Appends the value's bytes to `out`.
    func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(Tag.null.rawValue)
        case .bool(let value): out.append(value ? Tag.trueValue.rawValue : Tag.falseValue.rawValue)
        case .int(let value):
            out.append(Tag.int.rawValue)
            Self.writeVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)), to: &out)
        case .uint(let value):
            out.append(Tag.uint.rawValue)
            Self.writeVarint(value, to: &out)
        case .double(let value):
            out.append(Tag.double.rawValue)
            Self.writeFixed(value.bitPattern, to: &out)
        case .float(let value):
            out.append(Tag.float.rawValue)
            Self.writeFixed(value.bitPattern, to: &out)
        case .string(let value):
            out.append(Tag.string.rawValue)
            Self.writeString(value, to: &out)
        case .bytes(let value):
            out.append(Tag.bytes.rawValue)
            Self.writeVarint(UInt64(value.count), to: &out)
            out.append(contentsOf: value)
        case .keyed(let entries):
            out.append(Tag.keyed.rawValue)
            Self.writeVarint(UInt64(entries.count), to: &out)
            for (key, value) in entries {
                Self.writeString(key, to: &out)
                value.write(to: &out)
            }
        case .unkeyed(let values):
            out.append(Tag.unkeyed.rawValue)
            Self.writeVarint(UInt64(values.count), to: &out)
            for value in values { value.write(to: &out) }
        }
    }

    static func writeVarint(_ value: UInt64, to out: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
    }

    static func writeFixed<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    static func writeString(_ value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), to: &out)
            out.append(contentsOf: utf8)
        }
    }
}

/// Reads `BinaryValue`s and the envelope's fields from bytes, checking every length
/// against what is left: a truncated or hostile input is a `PortActorError.decoding`,
/// never a crash.
struct BinaryReader {
    let bytes: [UInt8]
    private(set) var offset: Int
    /// How deep containers may nest, so that hostile input cannot exhaust the stack.
    static let maxDepth = 256

    init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() throws(PortActorError) -> UInt8 {
        guard offset < bytes.count else { throw .decoding("the data ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws(PortActorError) -> UInt64 {
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

    mutating func count() throws(PortActorError) -> Int {
        let value = try varint()
        guard value <= UInt64(bytes.count - offset) else { throw .decoding("a length of \(value) is past the data's end") }
        return Int(value)
    }

    mutating func fixed<T: FixedWidthInteger>(_ type: T.Type) throws(PortActorError) -> T {
        let size = MemoryLayout<T>.size
        guard bytes.count - offset >= size else { throw .decoding("the data ends early") }
        var value: T = 0
        for index in 0..<size { value |= T(bytes[offset + index]) << (8 * index) }
        offset += size
        return value
    }

    mutating func raw(_ count: Int) throws(PortActorError) -> ArraySlice<UInt8> {
        guard bytes.count - offset >= count else { throw .decoding("the data ends early") }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func string() throws(PortActorError) -> String {
        let length = try count()
        return String(decoding: try raw(length), as: UTF8.self)
    }

    mutating func value(depth: Int = 0) throws(PortActorError) -> BinaryValue {
        guard depth < Self.maxDepth else { throw .decoding("containers nest deeper than \(Self.maxDepth)") }
        guard let tag = BinaryValue.Tag(rawValue: try byte()) else { throw .decoding("unknown tag \(bytes[offset - 1])") }
        switch tag {
        case .null: return .null
        case .falseValue: return .bool(false)
        case .trueValue: return .bool(true)
        case .int:
            let zigzag = try varint()
            return .int(Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1))
        case .uint: return .uint(try varint())
        case .double: return .double(Double(bitPattern: try fixed(UInt64.self)))
        case .float: return .float(Float(bitPattern: try fixed(UInt32.self)))
        case .string: return .string(try string())
        case .bytes: return .bytes(Array(try raw(try count())))
        case .keyed:
            let count = try count()
            var entries: [(String, BinaryValue)] = []
            entries.reserveCapacity(count)
            for _ in 0..<count { entries.append((try string(), try value(depth: depth + 1))) }
            return .keyed(entries)
        case .unkeyed:
            let count = try count()
            var values: [BinaryValue] = []
            values.reserveCapacity(count)
            for _ in 0..<count { values.append(try value(depth: depth + 1)) }
            return .unkeyed(values)
        }
    }
}
