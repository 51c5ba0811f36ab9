/// What makes a port name acceptable, in one place for the registry, the server and
/// the client.
///
/// A name is 1 to 255 bytes of UTF-8 with no whitespace, no control character and no
/// `/`, so a name is one word on any line that prints it (`portname list` and `watch`
/// split on blanks). Names are compared byte for byte; `"db"` and `"DB"` are two names.
/// A watch prefix follows the same rules, except that it may be empty (every name).
public enum NameRules {
    /// The longest name, in UTF-8 bytes.
    public static let maxNameBytes = 255

    /// Checks a name.
    /// - Throws: `NameServerError.invalidName` with the reason.
    public static func validate(_ name: String) throws(NameServerError) {
        if let reason = problem(with: name, allowEmpty: false) { throw .invalidName(name: name, reason: reason) }
    }

    /// Checks a watch prefix: a name, or the empty string.
    /// - Throws: `NameServerError.invalidName` with the reason.
    public static func validatePrefix(_ prefix: String) throws(NameServerError) {
        if let reason = problem(with: prefix, allowEmpty: true) { throw .invalidName(name: prefix, reason: reason) }
    }

    /// What is wrong with `name`, or `nil`.
    static func problem(with name: String, allowEmpty: Bool) -> NameServerError.InvalidNameReason? {
        let utf8 = name.utf8
        if utf8.isEmpty { return allowEmpty ? nil : .empty }
        if utf8.count > maxNameBytes { return .tooLong(bytes: utf8.count) }
        // ASCII decides most names without looking at Unicode properties; a native string's
        // bytes are read in place (walking the UTF-8 view byte by byte costs several times
        // more).
        let scan = { (bytes: UnsafeBufferPointer<UInt8>) -> (NameServerError.InvalidNameReason?, Bool) in
            var onlyASCII = true
            for byte in bytes {
                if byte < 0x20 || byte == 0x7F { return (.controlCharacter, false) }
                if byte == UInt8(ascii: " ") { return (.whitespace, false) }
                if byte == UInt8(ascii: "/") { return (.slash, false) }
                if byte >= 0x80 { onlyASCII = false }
            }
            return (nil, onlyASCII)
        }
        let (asciiProblem, onlyASCII) =
            utf8.withContiguousStorageIfAvailable(scan) ?? ContiguousArray(utf8).withUnsafeBufferPointer(scan)
        if let asciiProblem { return asciiProblem }
        if onlyASCII { return nil }
        for scalar in name.unicodeScalars where scalar.value >= 0x80 {
            // C1 controls (U+0080–U+009F) before whitespace: U+0085 is both.
            if scalar.value <= 0x9F { return .controlCharacter }
            if scalar.properties.isWhitespace { return .whitespace }
        }
        return nil
    }

    /// Checks a name that arrived as bytes: valid UTF-8, then the rules above.
    static func decode(_ bytes: [UInt8], allowEmpty: Bool = false) -> Result<String, NameServerError> {
        guard let name = String(validating: bytes, as: UTF8.self) else {
            return .failure(.invalidName(name: String(decoding: bytes, as: UTF8.self), reason: .notUTF8))
        }
        if let reason = problem(with: name, allowEmpty: allowEmpty) { return .failure(.invalidName(name: name, reason: reason)) }
        return .success(name)
    }

    /// The name with control characters and whitespace other than a space shown as
    /// `\u{…}`, for messages.
    static func printable(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
                || (scalar.value != 0x20 && scalar.properties.isWhitespace) {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result.count > 300 ? String(result.prefix(300)) + "…" : result
    }
}
