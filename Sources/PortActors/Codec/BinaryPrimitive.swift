/// A type the binary encoding writes as one `BinaryValue` of its own (not a container).
protocol BinaryPrimitive {
    /// The value in the encoding.
    var binaryValue: BinaryValue { get }
    /// Reads the value back, checking its kind and range.
    init(binary: BinaryValue) throws(PortActorError)
}

extension BinaryPrimitive where Self: FixedWidthInteger & SignedInteger {
    var binaryValue: BinaryValue { .int(Int64(self)) }

    init(binary: BinaryValue) throws(PortActorError) {
        switch binary {
        case .int(let value):
            guard let exact = Self(exactly: value) else { throw .decoding("\(value) does not fit \(Self.self)") }
            self = exact
        case .uint(let value):
            guard let exact = Self(exactly: value) else { throw .decoding("\(value) does not fit \(Self.self)") }
            self = exact
        default: throw .decoding("expected \(Self.self), found \(binary.kind)")
        }
    }
}

extension BinaryPrimitive where Self: FixedWidthInteger & UnsignedInteger {
    var binaryValue: BinaryValue { .uint(UInt64(self)) }

    init(binary: BinaryValue) throws(PortActorError) {
        switch binary {
        case .uint(let value):
            guard let exact = Self(exactly: value) else { throw .decoding("\(value) does not fit \(Self.self)") }
            self = exact
        case .int(let value):
            guard let exact = Self(exactly: value) else { throw .decoding("\(value) does not fit \(Self.self)") }
            self = exact
        default: throw .decoding("expected \(Self.self), found \(binary.kind)")
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
    var binaryValue: BinaryValue { .bool(self) }

    init(binary: BinaryValue) throws(PortActorError) {
        guard case .bool(let value) = binary else { throw .decoding("expected a Bool, found \(binary.kind)") }
        self = value
    }
}

extension String: BinaryPrimitive {
    var binaryValue: BinaryValue { .string(self) }

    init(binary: BinaryValue) throws(PortActorError) {
        guard case .string(let value) = binary else { throw .decoding("expected a string, found \(binary.kind)") }
        self = value
    }
}

extension Double: BinaryPrimitive {
    var binaryValue: BinaryValue { .double(self) }

    init(binary: BinaryValue) throws(PortActorError) {
        switch binary {
        case .double(let value): self = value
        case .float(let value): self = Double(value)
        case .int(let value): self = Double(value)
        case .uint(let value): self = Double(value)
        default: throw .decoding("expected a Double, found \(binary.kind)")
        }
    }
}

extension Float: BinaryPrimitive {
    var binaryValue: BinaryValue { .float(self) }

    init(binary: BinaryValue) throws(PortActorError) {
        switch binary {
        case .float(let value): self = value
        case .double(let value): self = Float(value)
        default: throw .decoding("expected a Float, found \(binary.kind)")
        }
    }
}

extension Array: BinaryPrimitive where Element == UInt8 {
    var binaryValue: BinaryValue { .bytes(self) }

    init(binary: BinaryValue) throws(PortActorError) {
        switch binary {
        case .bytes(let value): self = value
        case .unkeyed(let values):
            self = []
            for value in values { append(try UInt8(binary: value)) }
        default: throw .decoding("expected bytes, found \(binary.kind)")
        }
    }
}
