/// A type the binary encoding writes as one value of its own (not a container), straight
/// to the bytes and back.
protocol BinaryPrimitive {
    /// Appends the value, tag and payload.
    func write(to out: inout [UInt8])
    /// Reads the value back, checking its kind and range.
    init(from reader: inout BinaryReader) throws(PortActorError)
}

/// `T` as a primitive type, if it is one of them.
///
/// Found by comparing `T`'s metadata with each primitive's, a few instructions each,
/// rather than by a cast (`T.self as? any BinaryPrimitive.Type`), which asks the runtime
/// whether `T` conforms: a lookup in its conformance cache, several hundred instructions,
/// made for every value and argument encoded or decoded. The list is every type that
/// conforms to `BinaryPrimitive`, the commonest first.
func primitiveType<T>(_: T.Type) -> (any BinaryPrimitive.Type)? {
    switch ObjectIdentifier(T.self) {
    case ObjectIdentifier(Int.self): Int.self
    case ObjectIdentifier(String.self): String.self
    case ObjectIdentifier(Bool.self): Bool.self
    case ObjectIdentifier(Double.self): Double.self
    case ObjectIdentifier([UInt8].self): [UInt8].self
    case ObjectIdentifier(UInt64.self): UInt64.self
    case ObjectIdentifier(Int64.self): Int64.self
    case ObjectIdentifier(UInt32.self): UInt32.self
    case ObjectIdentifier(Int32.self): Int32.self
    case ObjectIdentifier(Float.self): Float.self
    case ObjectIdentifier(UInt.self): UInt.self
    case ObjectIdentifier(UInt8.self): UInt8.self
    case ObjectIdentifier(Int8.self): Int8.self
    case ObjectIdentifier(UInt16.self): UInt16.self
    case ObjectIdentifier(Int16.self): Int16.self
    default: nil
    }
}

private func mismatch(_ expected: String, _ tag: BinaryTag) -> PortActorError {
    .decoding("expected \(expected), found \(tag.kind)")
}

extension BinaryPrimitive where Self: FixedWidthInteger & SignedInteger {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.int.rawValue)
        out.appendZigzag(Int64(self))
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        self = try reader.integer()
    }
}

extension BinaryPrimitive where Self: FixedWidthInteger & UnsignedInteger {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.uint.rawValue)
        out.appendVarint(UInt64(self))
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        self = try reader.integer()
    }
}

extension BinaryReader {
    /// An integer of either signedness that fits a `T`.
    mutating func integer<T: FixedWidthInteger>() throws(PortActorError) -> T {
        let tag = try tag()
        switch tag {
        case .int:
            let value = try zigzag()
            guard let exact = T(exactly: value) else { throw .decoding("\(value) does not fit \(T.self)") }
            return exact
        case .uint:
            let value = try varint()
            guard let exact = T(exactly: value) else { throw .decoding("\(value) does not fit \(T.self)") }
            return exact
        default: throw mismatch("\(T.self)", tag)
        }
    }
}

extension Int: BinaryPrimitive {}
extension Int8: BinaryPrimitive {}
extension Int16: BinaryPrimitive {}
extension Int32: BinaryPrimitive {}
extension Int64: BinaryPrimitive {}
extension UInt: BinaryPrimitive {}
extension UInt8: BinaryPrimitive {}
extension UInt16: BinaryPrimitive {}
extension UInt32: BinaryPrimitive {}
extension UInt64: BinaryPrimitive {}

extension Bool: BinaryPrimitive {
    func write(to out: inout [UInt8]) {
        out.append(self ? BinaryTag.trueValue.rawValue : BinaryTag.falseValue.rawValue)
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        switch try reader.tag() {
        case .trueValue: self = true
        case .falseValue: self = false
        case let tag: throw mismatch("a Bool", tag)
        }
    }
}

extension String: BinaryPrimitive {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.string.rawValue)
        out.appendString(self)
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        let tag = try reader.tag()
        guard tag == .string else { throw mismatch("a string", tag) }
        self = try reader.string()
    }
}

extension Double: BinaryPrimitive {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.double.rawValue)
        out.appendFixed(bitPattern)
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        switch try reader.tag() {
        case .double: self = Double(bitPattern: try reader.fixed(UInt64.self))
        case .float: self = Double(Float(bitPattern: try reader.fixed(UInt32.self)))
        case .int: self = Double(try reader.zigzag())
        case .uint: self = Double(try reader.varint())
        case let tag: throw mismatch("a Double", tag)
        }
    }
}

extension Float: BinaryPrimitive {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.float.rawValue)
        out.appendFixed(bitPattern)
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        switch try reader.tag() {
        case .float: self = Float(bitPattern: try reader.fixed(UInt32.self))
        case .double: self = Float(Double(bitPattern: try reader.fixed(UInt64.self)))
        case let tag: throw mismatch("a Float", tag)
        }
    }
}

extension Array: BinaryPrimitive where Element == UInt8 {
    func write(to out: inout [UInt8]) {
        out.append(BinaryTag.bytes.rawValue)
        out.appendVarint(UInt64(count))
        out.append(contentsOf: self)
    }

    init(from reader: inout BinaryReader) throws(PortActorError) {
        switch try reader.tag() {
        case .bytes: self = Array(try reader.raw(try reader.count()))
        case .unkeyed:
            let count = try reader.count()
            self = []
            reserveCapacity(count)
            for _ in 0..<count { append(try UInt8(from: &reader)) }
        case let tag: throw mismatch("bytes", tag)
        }
    }
}

/// An unkeyed or single-value container that writes every primitive the same way
/// (`primitive(_:)`): the overloads `Encodable` asks of both, written once.
protocol PrimitiveEncodingContainer {
    /// Writes `value` as the container's next element.
    mutating func primitive(_ value: some BinaryPrimitive)
}

extension PrimitiveEncodingContainer {
    mutating func encode(_ value: Bool) throws { primitive(value) }
    mutating func encode(_ value: String) throws { primitive(value) }
    mutating func encode(_ value: Double) throws { primitive(value) }
    mutating func encode(_ value: Float) throws { primitive(value) }
    mutating func encode(_ value: Int) throws { primitive(value) }
    mutating func encode(_ value: Int8) throws { primitive(value) }
    mutating func encode(_ value: Int16) throws { primitive(value) }
    mutating func encode(_ value: Int32) throws { primitive(value) }
    mutating func encode(_ value: Int64) throws { primitive(value) }
    mutating func encode(_ value: UInt) throws { primitive(value) }
    mutating func encode(_ value: UInt8) throws { primitive(value) }
    mutating func encode(_ value: UInt16) throws { primitive(value) }
    mutating func encode(_ value: UInt32) throws { primitive(value) }
    mutating func encode(_ value: UInt64) throws { primitive(value) }
}

/// Writes `value`, whose type `T` is the primitive type `P`, as that primitive.
///
/// The encoders ask whether a value's static type is a primitive (`primitiveType(_:)`),
/// not whether the value is one (`value as? any BinaryPrimitive`, a dynamic cast that
/// boxes the value and costs about twice as much). The two differ only for an
/// `Optional` holding a primitive, which the cast unwraps: it is then encoded through
/// `Optional.encode(to:)`, whose single-value container writes the same bytes.
func writePrimitive<T, P: BinaryPrimitive>(_ value: T, as _: P.Type, to out: inout [UInt8]) {
    unsafeBitCast(value, to: P.self).write(to: &out)
}
