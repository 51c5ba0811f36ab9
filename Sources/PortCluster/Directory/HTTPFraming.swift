/// HTTP/1.1's framing, read from what a connection has received (`pending`): the head of
/// an answer and the chunks of a chunked body. Each takes a whole piece or nothing.
extension HTTPConnection {
    /// The status line and headers (names lower-cased), once the whole head has come;
    /// `nil` (nothing taken) before.
    func takeHead() throws(HTTPFailure) -> (Int, [String: String])? {
        var lines: [String] = []
        var cursor = pending.startIndex
        while true {
            guard let end = pending[cursor...].firstIndex(of: UInt8(ascii: "\n")) else {
                guard pending.count < 65_536 else { throw .malformed("a head of more than 64 KiB") }
                return nil
            }
            var line = pending[cursor..<end]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            cursor = end + 1
            if line.isEmpty { break }
            lines.append(String(decoding: line, as: UTF8.self))
        }
        pending.removeSubrange(..<cursor)
        let statusLine = lines.first ?? ""
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformed("status line \(statusLine.prefix(80).debugDescription)")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("header \(line.prefix(80).debugDescription)") }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingSpaces
        }
        return (status, headers)
    }

    /// One chunk of a chunked body.
    enum Chunk {
        case data([UInt8])
        case last
    }

    /// Takes a whole chunk from `pending`; `nil` (nothing taken) while it is not all there.
    func takeChunk() throws(HTTPFailure) -> Chunk? {
        let newline = UInt8(ascii: "\n"), carriageReturn = UInt8(ascii: "\r")
        guard let lineEnd = pending.firstIndex(of: newline) else {
            guard pending.count < 1024 else { throw .malformed("a chunk size line of more than 1 KiB") }
            return nil
        }
        let sizeText = String(decoding: pending[..<lineEnd].prefix { $0 != UInt8(ascii: ";") && $0 != carriageReturn }, as: UTF8.self)
        guard let size = Int(sizeText.trimmingSpaces, radix: 16), size >= 0 else {
            throw .malformed("chunk size \(sizeText.prefix(40).debugDescription)")
        }
        let start = lineEnd + 1
        if size == 0 {
            // Trailers, up to an empty line.
            var cursor = start
            while let end = pending[cursor...].firstIndex(of: newline) {
                let empty = end == cursor || (end == cursor + 1 && pending[cursor] == carriageReturn)
                cursor = end + 1
                if empty {
                    pending.removeFirst(cursor)
                    return .last
                }
            }
            return nil
        }
        guard pending.count >= start + size + 2 else { return nil }
        guard pending[start + size] == carriageReturn, pending[start + size + 1] == newline else {
            throw .malformed("a chunk longer than its size")
        }
        let data = Array(pending[start..<start + size])
        pending.removeFirst(start + size + 2)
        return .data(data)
    }
}

extension StringProtocol {
    /// The text without the spaces and tabs at its ends (an HTTP header's value).
    var trimmingSpaces: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}
