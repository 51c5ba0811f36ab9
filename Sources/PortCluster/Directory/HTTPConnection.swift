import FoundationEssentials
import Glibc
import PermanentThread
import PortMessaging

/// Why an HTTP exchange with the directory failed.
enum HTTPFailure: Error, Sendable, CustomStringConvertible {
    /// No connection could be made (refused, unreachable, the name did not resolve).
    case connect(String)
    /// The connection broke (reset, closed before the whole answer came).
    case broken(String)
    /// The deadline passed first.
    case timedOut
    /// The server's answer is not HTTP/1.1 as expected.
    case malformed(String)

    var description: String {
        switch self {
        case .connect(let reason): "cannot connect: \(reason)"
        case .broken(let reason): "the connection broke: \(reason)"
        case .timedOut: "no answer in time"
        case .malformed(let reason): "a malformed answer: \(reason)"
        }
    }
}

/// One HTTP/1.1 client connection over TCP: requests answered in order on one kept-alive
/// connection, or one streamed (chunked) answer read message by message. With a
/// `security`, the bytes go over the stream it makes (HTTPS with `ClusterTLS`), its
/// handshake done when the connection is made.
///
/// Not thread-safe: its owner serialises the calls (`EtcdClient` holds it under a lock; a
/// watch has one of its own).
final class HTTPConnection {
    /// The server's host (a name or a numeric address) and port.
    let host: String
    let port: UInt16
    /// What secures the connection, if anything.
    let security: (any StreamSecurity)?
    private var socket: FileDescriptor?
    /// The secured stream over `socket`, with a `security`.
    private var stream: (any SecuredStream)?
    /// Bytes read past what the last answer (or chunk) used.
    private var pending: [UInt8] = []
    /// A streamed answer's body, decoded from its chunks, not yet split into messages.
    private var streamed: [UInt8] = []

    /// An answer: its status and body.
    struct Response {
        var status: Int
        var body: [UInt8]
    }

    init(host: String, port: UInt16, security: (any StreamSecurity)? = nil) {
        self.host = host
        self.port = port
        self.security = security
    }

    deinit { close() }

    /// The socket, once connected: a watch's owner waits for it to become readable.
    var descriptor: CInt? { socket?.rawValue }

    /// Closes the connection (the next request opens another).
    func close() {
        stream = nil
        if let socket { try? socket.close() }
        socket = nil
        pending = []
        streamed = []
    }

    // MARK: Requests

    /// POSTs `body` (JSON) to `path` and reads the whole answer, by `deadline`. A kept
    /// connection the server closed meanwhile is opened again, once.
    func post(_ path: String, body: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Response {
        let reused = socket != nil
        do {
            return try exchange(path, body: body, deadline: deadline)
        } catch {
            close()
            guard reused, case .broken = error else { throw error }
            return try exchange(path, body: body, deadline: deadline)
        }
    }

    private func exchange(_ path: String, body: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Response {
        try write(request(path, body: body), deadline: deadline)
        let (status, headers) = try readHead(deadline: deadline)
        let body: [UInt8]
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            var all: [UInt8] = []
            while let chunk = try readChunk(deadline: deadline) { all += chunk }
            body = all
        } else if let length = headers["content-length"].flatMap({ Int($0) }) {
            body = try readExactly(length, deadline: deadline)
        } else {
            throw .malformed("an answer with neither a length nor chunks")
        }
        if headers["connection"]?.lowercased() == "close" { close() }
        return Response(status: status, body: body)
    }

    // MARK: A streamed answer

    /// POSTs `body` to `path` and reads the head of a streamed answer; its status.
    func startStream(_ path: String, body: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Int {
        close()
        try write(request(path, body: body), deadline: deadline)
        let (status, headers) = try readHead(deadline: deadline)
        guard headers["transfer-encoding"]?.lowercased() == "chunked" else {
            throw .malformed("a stream that is not chunked")
        }
        return status
    }

    /// The next newline-delimited message of a streamed answer, waiting until `deadline`;
    /// `nil` when the deadline passes first.
    /// - Throws: `.broken` when the stream ends.
    func nextMessage(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> [UInt8]? {
        while true {
            if let newline = streamed.firstIndex(of: UInt8(ascii: "\n")) {
                let message = Array(streamed[..<newline])
                streamed.removeSubrange(...newline)
                if message.allSatisfy({ $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: " ") }) { continue }
                return message
            }
            do throws(HTTPFailure) {
                guard let chunk = try readChunk(deadline: deadline) else { throw HTTPFailure.broken("the stream ended") }
                streamed += chunk
            } catch .timedOut {
                return nil
            }
        }
    }

    // MARK: Wire

    private func request(_ path: String, body: [UInt8]) -> [UInt8] {
        let head = "POST \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.count)\r\n\r\n"
        return Array(head.utf8) + body
    }

    private func connected(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> FileDescriptor {
        if let socket { return socket }
        let addresses: [TCPSocket.Address]
        do { addresses = try TCPSocket.resolve(host, port: port) } catch { throw .connect(error.description) }
        var last = "no address"
        for address in addresses {
            let made: FileDescriptor
            do { made = try TCPSocket.connect(to: address, deadline: deadline) } catch {
                last = error.description
                if error.rawValue == ETIMEDOUT { throw .timedOut }
                continue
            }
            if let security { stream = try secure(made, by: security, deadline: deadline) }
            socket = made
            return made
        }
        throw .connect("\(host):\(port): \(last)")
    }

    /// A secured stream over the connected `socket`, its handshake done by `deadline`; the
    /// socket is closed when it fails.
    private func secure(
        _ socket: FileDescriptor, by security: any StreamSecurity, deadline: ContinuousClock.Instant
    ) throws(HTTPFailure) -> any SecuredStream {
        do throws(HTTPFailure) {
            let stream: any SecuredStream
            do { stream = try security.secure(socket: socket.rawValue, as: .connecting(host: host)) } catch {
                throw HTTPFailure.connect("\(host):\(port): \(error)")
            }
            while true {
                switch stream.handshake() {
                case .complete: return stream
                case .wantsReadable: try wait(socket, for: POLLIN, deadline: deadline)
                case .wantsWritable: try wait(socket, for: POLLOUT, deadline: deadline)
                case .failed(let reason): throw HTTPFailure.connect("\(host):\(port): the TLS handshake failed: \(reason)")
                }
            }
        } catch {
            try? socket.close()
            throw error
        }
    }

    private func write(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) {
        let socket = try connected(deadline: deadline)
        var offset = 0
        while offset < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                let rest = UnsafeRawBufferPointer(rebasing: raw[offset...])
                guard let stream else { return Result { () throws(Errno) in try socket.send(rest) } }
                return Self.result(of: stream.write(rest))
            }
            switch result {
            case .success(0): throw .broken("closed by the server")
            case .success(let sent): offset += sent
            case .failure(let error) where error == .wouldBlock: try wait(socket, for: POLLOUT, deadline: deadline)
            case .failure(let error): throw .broken(error.description)
            }
        }
    }

    private func wait(_ socket: FileDescriptor, for event: CInt, deadline: ContinuousClock.Instant) throws(HTTPFailure) {
        let left = deadline - .now
        guard left > .zero else { throw .timedOut }
        let ready: CShort
        do { ready = try socket.poll(CShort(event), timeout: left) } catch { throw .broken(error.description) }
        if ready == 0 { throw .timedOut }
    }

    /// Reads more into `pending`, waiting until `deadline`.
    private func fill(deadline: ContinuousClock.Instant) throws(HTTPFailure) {
        guard let socket else { throw .broken("not connected") }
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let result = chunk.withUnsafeMutableBytes { raw in
                guard let stream else { return Result { () throws(Errno) in try socket.read(into: raw) } }
                return Self.result(of: stream.read(into: raw))
            }
            switch result {
            case .success(0): throw .broken("closed by the server")
            case .success(let count):
                pending += chunk[..<count]
                return
            case .failure(let error) where error == .wouldBlock: try wait(socket, for: POLLIN, deadline: deadline)
            case .failure(let error): throw .broken(error.description)
            }
        }
    }

    /// A secured stream's transfer as a socket call's result: its end as a read of 0 bytes
    /// (a write never sees it), nothing now as `wouldBlock`.
    private static func result(of transfer: StreamTransfer) -> Result<Int, Errno> {
        switch transfer {
        case .transferred(let count): .success(count)
        case .wouldBlock: .failure(.wouldBlock)
        case .closed: .success(0)
        case .failed(let errno, _): .failure(Errno(rawValue: errno == 0 ? EPROTO : errno))
        }
    }

    private func readLine(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> String {
        while true {
            if let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                var line = pending[..<end]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                pending.removeSubrange(...end)
                return String(decoding: line, as: UTF8.self)
            }
            guard pending.count < 65_536 else { throw .malformed("a header line of more than 64 KiB") }
            try fill(deadline: deadline)
        }
    }

    private func readExactly(_ count: Int, deadline: ContinuousClock.Instant) throws(HTTPFailure) -> [UInt8] {
        while pending.count < count { try fill(deadline: deadline) }
        let bytes = Array(pending[..<count])
        pending.removeFirst(count)
        return bytes
    }

    /// The status line and headers (names lower-cased).
    private func readHead(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> (Int, [String: String]) {
        let statusLine = try readLine(deadline: deadline)
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformed("status line \(statusLine.prefix(80).debugDescription)")
        }
        var headers: [String: String] = [:]
        while true {
            let line = try readLine(deadline: deadline)
            if line.isEmpty { return (status, headers) }
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("header \(line.prefix(80).debugDescription)") }
            let name = line[..<colon].lowercased()
            headers[name] = line[line.index(after: colon)...].trimmingSpaces
        }
    }

    /// The next chunk's data; `nil` after the last (zero-length) chunk and its trailers.
    /// A deadline that passes part way leaves the partial chunk unread for the next call.
    private func readChunk(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> [UInt8]? {
        while true {
            switch try takeChunk() {
            case .data(let data)?: return data
            case .last?: return nil
            case nil: try fill(deadline: deadline)
            }
        }
    }

    /// One chunk of a chunked body.
    private enum Chunk {
        case data([UInt8])
        case last
    }

    /// Takes a whole chunk from `pending`; `nil` (nothing taken) while it is not all there.
    private func takeChunk() throws(HTTPFailure) -> Chunk? {
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
