/// Splits an `Exec=` line into words, the way a shell would for the simple cases and
/// with no expansion at all:
/// - words are separated by spaces or tabs;
/// - `"…"` groups a word with spaces; `'…'` too, taken literally (no escape inside);
/// - a backslash outside single quotes takes the next character literally (`\"`, `\\`,
///   `\ `, a space in a word).
///
/// No variables, globs, `~` or `%` specifiers are expanded; an unterminated quote or a
/// trailing backslash is refused.
enum ExecLine {
    /// Why an `Exec=` line is refused.
    enum Problem: Error, Hashable, CustomStringConvertible {
        case empty
        case unterminatedQuote
        case trailingBackslash

        var description: String {
            switch self {
            case .empty: "nothing to run"
            case .unterminatedQuote: "a quote is not closed"
            case .trailingBackslash: "a backslash ends the line"
            }
        }
    }

    /// The words of `line`.
    static func split(_ line: String) -> Result<[String], Problem> {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        var escaped = false
        for character in line {
            if escaped {
                word.append(character)
                escaped = false
                continue
            }
            switch (quote, character) {
            case ("'", "'"), ("\"", "\""):
                quote = nil
            case ("'", _):
                word.append(character)
            case ("\"", "\\"), (nil, "\\"):
                escaped = true
                inWord = true
            case ("\"", _):
                word.append(character)
            case (nil, "'"), (nil, "\""):
                quote = character
                inWord = true
            case (nil, " "), (nil, "\t"):
                if inWord { words.append(word) }
                word = ""
                inWord = false
            default:
                word.append(character)
                inWord = true
            }
        }
        if quote != nil { return .failure(.unterminatedQuote) }
        if escaped { return .failure(.trailingBackslash) }
        if inWord { words.append(word) }
        return words.isEmpty ? .failure(.empty) : .success(words)
    }
}
