import FoundationEssentials

/// A JSON value, as etcd's JSON gateway reads and writes them: what the directory's
/// requests are built from and its answers are read as. Built on `JSONEncoder` and
/// `JSONDecoder`, so the cluster layer needs only Foundation's essentials.
///
/// etcd writes its 64-bit integers (revisions, lease ids) as strings; `int64` reads either
/// form. A number that is a whole 64-bit integer is kept exact.
enum JSONValue: Codable, Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member `key` of an object; `nil` for a missing member or a value that is not an
    /// object.
    subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { members[key] } else { nil }
    }

    /// The text of a string.
    var string: String? { if case .string(let text) = self { text } else { nil } }
    /// The value of a Boolean.
    var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
    /// The elements of an array.
    var array: [JSONValue]? { if case .array(let elements) = self { elements } else { nil } }
    /// A 64-bit integer, written as a string (etcd's way) or as a whole number.
    var int64: Int64? {
        switch self {
        case .string(let text): Int64(text)
        case .integer(let value): value
        case .number(let value): Int64(exactly: value)
        default: nil
        }
    }

    /// The value the bytes of a JSON text hold.
    /// - Throws: `DirectoryError.malformedAnswer` when they are not JSON.
    static func parse(_ bytes: [UInt8]) throws(DirectoryError) -> JSONValue {
        do { return try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) } catch {
            throw .malformedAnswer("not JSON: \(String(decoding: bytes.prefix(80), as: UTF8.self).debugDescription)")
        }
    }

    /// The JSON text of the value.
    var bytes: [UInt8] { (try? JSONEncoder().encode(self)).map(Array.init) ?? Array("null".utf8) }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    init(stringLiteral value: String) { self = .string(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    init(dictionaryLiteral members: (String, JSONValue)...) {
        self = .object(Dictionary(members, uniquingKeysWith: { _, last in last }))
    }
}
