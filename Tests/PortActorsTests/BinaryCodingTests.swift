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

    @Test(arguments: [[UInt8](), [9], [9, 5], [7, 200, 1], [10, 0xff, 0xff, 0xff, 0xff, 0x0f], [42], [3, 0x80]])
    func damagedInputIsATypedError(bytes: [UInt8]) {
        #expect(throws: PortActorError.self) { _ = try BinaryDecoder().decode([Int].self, from: bytes) }
    }

    @Test func deeplyNestedInputIsRefusedNotAStackOverflow() {
        let bytes = (0..<200_000).map { $0 % 2 == 0 ? UInt8(10) : UInt8(1) }
        #expect(throws: PortActorError.self) { _ = try BinaryDecoder().decode([Int].self, from: bytes) }
    }
}
