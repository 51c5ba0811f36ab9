@testable import PortActors
import Testing

/// PortActors' binary encoding: values round-trip, the layout is as documented, and
/// damaged input is a typed error.
@Suite("Actor binary encoding")
struct BinaryCodingTests {
    struct Nested: Codable, Equatable {
        enum Kind: String, Codable { case small, large }
        var name: String
        var count: Int
        var ratio: Double
        var flag: Bool
        var kind: Kind
        var optional: Int?
        var missing: String?
        var numbers: [Int64]
        var bytes: [UInt8]
        var table: [String: [UInt16]]
        var inner: [Nested]
    }

    func roundTrip<T: Codable & Equatable>(_ value: T) throws -> T {
        let bytes = try BinaryEncoder().encode(value)
        return try BinaryDecoder().decode(T.self, from: bytes)
    }

    @Test func valuesRoundTrip() throws {
        let leaf = Nested(
            name: "leaf", count: -3, ratio: 0.25, flag: false, kind: .small, optional: nil, missing: nil, numbers: [],
            bytes: [], table: [:], inner: [])
        let value = Nested(
            name: "héllo", count: Int.min, ratio: -1e300, flag: true, kind: .large, optional: 42, missing: nil,
            numbers: [0, 1, -1, .max, .min], bytes: [0, 255, 7], table: ["a": [1, 2], "b": []], inner: [leaf, leaf])
        #expect(try roundTrip(value) == value)
        #expect(try roundTrip(UInt64.max) == UInt64.max)
        #expect(try roundTrip([String?](["x", nil])) == ["x", nil])
    }

    @Test func theLayoutIsTagsAndVarints() throws {
        struct Small: Codable { var a: Int; var b: String }
        // keyed(2) "a" int(zigzag 300 = 600 → 0xd8 0x04) "b" string(2) "hi"
        #expect(try BinaryEncoder().encode(Small(a: 300, b: "hi")) == [9, 2, 1, 97, 3, 0xd8, 0x04, 1, 98, 7, 2, 104, 105])
        #expect(try BinaryEncoder().encode([UInt8]([1, 2])) == [8, 2, 1, 2])
    }

    /// An `Optional` holding a value is written as the value alone, at the top and nested,
    /// and `nil` as the null tag: the bytes an older encoder, which unwrapped it, wrote.
    @Test func anOptionalIsItsValueOrNull() throws {
        #expect(try BinaryEncoder().encode(Int?.some(300)) == BinaryEncoder().encode(300))
        #expect(try BinaryEncoder().encode(String??.some("hi")) == BinaryEncoder().encode("hi"))
        #expect(try BinaryEncoder().encode([UInt8]?.some([1, 2])) == [8, 2, 1, 2])
        #expect(try BinaryEncoder().encode(Int?.none) == [0])
        // unkeyed(2) int(zigzag 5 = 10) null
        #expect(try BinaryEncoder().encode([Int?]([5, nil])) == [10, 2, 3, 10, 0])
        #expect(try roundTrip(Int?.some(300)) == 300)
        #expect(try roundTrip(Int?.none) == nil)
    }

    /// Every primitive type is found as one (`primitiveType(_:)`, a list kept beside the
    /// conformances), and is written as a primitive: no container tag.
    @Test func everyPrimitiveIsFoundAsOne() throws {
        #expect(primitiveType(Int.self) is Int.Type)
        #expect(primitiveType([UInt8].self) is [UInt8].Type)
        let found: [Bool] = [
            isPrimitive(Int8.self), isPrimitive(Int16.self), isPrimitive(Int32.self), isPrimitive(Int64.self),
            isPrimitive(UInt.self), isPrimitive(UInt8.self), isPrimitive(UInt16.self), isPrimitive(UInt32.self),
            isPrimitive(UInt64.self), isPrimitive(Bool.self), isPrimitive(String.self), isPrimitive(Double.self),
            isPrimitive(Float.self),
        ]
        #expect(found.allSatisfy { $0 })
        #expect(primitiveType(Int?.self) == nil)
        #expect(primitiveType([Int].self) == nil)
        #expect(primitiveType(Nested.self) == nil)
    }

    private func isPrimitive<T: BinaryPrimitive>(_ type: T.Type) -> Bool {
        primitiveType(type) != nil
    }

    /// A short keyed container (read through on each lookup) and a long one (a table and
    /// a cursor) answer the same: keys in any order, unknown ones skipped, `allKeys`,
    /// `contains`, a missing key an error.
    @Test(arguments: [3, 12])
    func keyedContainersFindTheirKeysInAnyOrder(count: Int) throws {
        struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        struct Reversed: Decodable {
            var values: [Int] = []
            var keys: [String] = []
            var hasMissing = true
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: AnyKey.self)
                keys = container.allKeys.map(\.stringValue)
                for key in container.allKeys.reversed() { values.append(try container.decode(Int.self, forKey: key)) }
                hasMissing = container.contains(AnyKey(stringValue: "missing"))
                #expect(throws: DecodingError.self) { try container.decode(Int.self, forKey: AnyKey(stringValue: "missing")) }
            }
        }
        var table: [String: Int] = [:]
        for index in 0..<count { table["k\(index)"] = index }
        let decoded = try BinaryDecoder().decode(Reversed.self, from: BinaryEncoder().encode(table))
        #expect(Set(decoded.keys) == Set(table.keys))
        #expect(decoded.values == decoded.keys.reversed().map { table[$0]! })
        #expect(!decoded.hasMissing)
    }

    @Test func theLayoutDecodesAsWritten() throws {
        struct Small: Codable, Equatable { var a: Int; var b: String }
        let bytes: [UInt8] = [9, 2, 1, 98, 7, 2, 104, 105, 1, 97, 3, 0xd8, 0x04]  // keys in another order
        #expect(try BinaryDecoder().decode(Small.self, from: bytes) == Small(a: 300, b: "hi"))
    }

    /// A container of 128 entries or more has a count of two bytes or more: the one-byte
    /// placeholder written when it opened grows, and what follows it moves.
    @Test(arguments: [127, 128, 200, 20_000])
    func longContainersCountInVarints(count: Int) throws {
        struct Holder: Codable, Equatable { var numbers: [UInt16]; var after: String; var table: [String: Int] }
        let value = Holder(
            numbers: (0..<count).map { UInt16(truncatingIfNeeded: $0) }, after: "after",
            table: Dictionary(uniqueKeysWithValues: (0..<count).map { ("k\($0)", $0) }))
        let bytes = try BinaryEncoder().encode([value, value])
        #expect(try BinaryDecoder().decode([Holder].self, from: bytes) == [value, value])
        var countBytes: [UInt8] = []
        countBytes.appendVarint(UInt64(count))
        let numbers = try BinaryEncoder().encode(value.numbers)
        #expect(Array(numbers.prefix(1 + countBytes.count)) == [10] + countBytes)
    }

    class Base: Codable {
        var base: Int
        init(base: Int) { self.base = base }
    }

    final class Derived: Base {
        var derived: String
        init(base: Int, derived: String) {
            self.derived = derived
            super.init(base: base)
        }
        enum CodingKeys: CodingKey { case derived }
        required init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            derived = try container.decode(String.self, forKey: .derived)
            try super.init(from: container.superDecoder())
        }
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try super.encode(to: container.superEncoder())
            try container.encode(derived, forKey: .derived)
        }
    }

    @Test func aSuperclassEncodesUnderSuper() throws {
        let decoded = try BinaryDecoder().decode(Derived.self, from: BinaryEncoder().encode(Derived(base: 7, derived: "d")))
        #expect(decoded.base == 7 && decoded.derived == "d")
    }

    struct Silent: Codable {
        init() {}
        init(from decoder: any Decoder) throws {}
        func encode(to encoder: any Encoder) throws {}
    }

    struct TwiceAsked: Codable, Equatable {
        var a = 1, b = 2
        enum CodingKeys: CodingKey { case a, b }
        init() {}
        init(from decoder: any Decoder) throws {
            a = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .a)
            b = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .b)
        }
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: CodingKeys.self)
            try first.encode(a, forKey: .a)
            var second = encoder.container(keyedBy: CodingKeys.self)
            try second.encode(b, forKey: .b)
        }
    }

    @Test func aValueThatWritesNothingIsNilAndAContainerAskedTwiceIsOne() throws {
        #expect(try BinaryEncoder().encode([Silent(), Silent()]) == [10, 2, 0, 0])
        #expect(try BinaryEncoder().encode(TwiceAsked()) == [9, 2, 1, 97, 3, 2, 1, 98, 3, 4])
        #expect(try BinaryDecoder().decode(TwiceAsked.self, from: BinaryEncoder().encode(TwiceAsked())) == TwiceAsked())
    }

    /// A container written to after a container outside it: refused, not bytes out of place.
    struct OutOfOrder: Encodable {
        func encode(to encoder: any Encoder) throws {
            var outer = encoder.unkeyedContainer()
            var inner = outer.nestedUnkeyedContainer()
            try outer.encode(1)
            try inner.encode(2)
        }
    }

    @Test func aContainerWrittenOutOfOrderIsAnError() {
        #expect(throws: EncodingError.self) { _ = try BinaryEncoder().encode(OutOfOrder()) }
    }

    @Test(arguments: [[UInt8](), [9], [9, 5], [7, 200, 1], [10, 0xff, 0xff, 0xff, 0xff, 0x0f], [42], [3, 0x80]])
    func damagedInputIsATypedError(bytes: [UInt8]) {
        #expect(throws: PortActorError.self) { _ = try BinaryDecoder().decode([Int].self, from: bytes) }
    }

    @Test func deeplyNestedInputIsRefusedNotAStackOverflow() {
        let bytes = (0..<200_000).map { $0 % 2 == 0 ? UInt8(10) : UInt8(1) }
        #expect(throws: PortActorError.self) { _ = try BinaryDecoder().decode([Int].self, from: bytes) }
    }
}
