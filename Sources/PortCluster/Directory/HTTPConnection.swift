import FoundationEssentials
import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

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

/// One HTTP/1.1 client connection over TCP, as a state machine that never waits: requests
/// answered in order on one kept-alive connection, or one streamed (chunked) answer read
/// message by message. With a `security`, the bytes go over the stream it makes (HTTPS
/// with `ClusterTLS`), its handshake part of connecting.
///
/// `advance()` moves an exchange as far as the socket allows and says what it waits for
/// (`Step.wants`); its driver waits for that, on a loop (`HTTPLoopDriver`, a descriptor
/// source and a deadline timer) or blocking (`post`, `startStream`, `nextMessage`, which
/// poll), and calls it again. One mechanism for both.
///
/// Not thread-safe: its owner serialises the calls (`EtcdClient` holds it under a lock; a
/// watch has one of its own; a loop driver uses it on its loop's thread).
final class HTTPConnection {
    /// The server's host (a name or a numeric address) and port.
    let host: String
    let port: UInt16
    /// What secures the connection, if anything.
    let security: (any StreamSecurity)?
    private(set) var socket: FileDescriptor?
    /// The secured stream over `socket`, with a `security`.
    private var stream: (any SecuredStream)?
    /// Bytes read past what the last answer (or chunk) used.
    var pending: [UInt8] = []
    /// A streamed answer's body, decoded from its chunks, not yet split into messages.
    var streamed: [UInt8] = []
    /// Where the current exchange is.
    private(set) var phase: Phase = .idle
    /// Called with the socket just before it closes: a loop driver's source ends first.
    var willClose: ((CInt) -> Void)?
    /// Why the last address tried could not be reached.
    private var connectFailure = "no address"

    /// An answer: its status and body.
    struct Response {
        var status: Int
        var body: [UInt8]
    }

    /// One request: its bytes, and whether its answer is a stream.
    struct Request {
        var bytes: [UInt8]
        var streamed: Bool
        /// Whether it went out on a kept connection: one that broke before answering is
        /// opened again, once (the server closed it meanwhile).
        var reused: Bool
    }

    /// The phases of an exchange.
    enum Phase {
        /// No exchange (connected or not).
        case idle
        /// The TCP handshake to one of `addresses` is under way; the others are left to try.
        case connecting(Request, addresses: [TCPSocket.Address])
        /// The TLS handshake is under way.
        case securing(Request)
        /// The request is going out; `offset` bytes have gone.
        case writing(Request, offset: Int)
        /// The status line and headers are awaited.
        case readingHead(Request)
        /// A body of `length` bytes is awaited.
        case readingBody(status: Int, length: Int, closing: Bool)
        /// A chunked body is awaited; `body` holds the chunks so far.
        case readingChunks(status: Int, body: [UInt8], closing: Bool)
        /// A streamed answer's head has come; its messages come as they are sent.
        case streaming
    }

    /// What the driver does next.
    enum Step {
        /// Wait until the socket is readable (or writable), then `advance()` again.
        case wantsReadable, wantsWritable
        /// The answer is whole.
        case answered(Response)
        /// A streamed answer's head came: its status (`nextMessages` reads on).
        case streamOpened(status: Int)
        /// The exchange failed; the connection is closed.
        case failed(HTTPFailure)
    }

    init(host: String, port: UInt16, security: (any StreamSecurity)? = nil) {
        self.host = host
        self.port = port
        self.security = security
    }

    deinit { close() }

    /// The socket, once connecting: what a driver waits on.
    var descriptor: CInt? { socket?.rawValue }

    /// Closes the connection (the next request opens another) and ends any exchange.
    func close() {
        stream = nil
        if let socket {
            willClose?(socket.rawValue)
            try? socket.close()
        }
        socket = nil
        pending = []
        streamed = []
        phase = .idle
    }

    // MARK: The machine

    /// Begins an exchange: POSTs `body` (JSON) to `path`. A streamed answer takes the
    /// connection for itself (a kept one is closed first).
    func begin(_ path: String, body: [UInt8], streamed: Bool) {
        if streamed || !isIdle { close() }
        let head = "POST \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.count)\r\n\r\n"
        let request = Request(bytes: Array(head.utf8) + body, streamed: streamed, reused: socket != nil)
        phase = socket == nil ? .connecting(request, addresses: []) : .writing(request, offset: 0)
        if socket == nil { startConnecting(request) }
    }

    private var isIdle: Bool { if case .idle = phase { true } else { false } }

    /// Moves the exchange as far as it goes without waiting.
    func advance() -> Step {
        do throws(HTTPFailure) {
            while true {
                if let step = try step() { return step }
            }
        } catch {
            if case .broken = error, let request = retriable {
                close()
                var again = request
                again.reused = false
                phase = .connecting(again, addresses: [])
                startConnecting(again)
                return advance()
            }
            close()
            return .failed(error)
        }
    }

    /// The request of an exchange on a kept connection that broke before any answer came.
    private var retriable: Request? {
        switch phase {
        case .writing(let request, _) where request.reused, .readingHead(let request) where request.reused && pending.isEmpty: request
        default: nil
        }
    }

    /// One move: `nil` when the phase changed and the next may go on at once.
    private func step() throws(HTTPFailure) -> Step? {
        switch phase {
        case .idle:
            throw .broken("no exchange under way")
        case .connecting(let request, let addresses):
            guard let socket else { throw .connect("\(host):\(port): \(connectFailure)") }
            do {
                guard try TCPSocket.finishConnecting(socket) else { return .wantsWritable }
            } catch {
                willClose?(socket.rawValue)
                try? socket.close()
                self.socket = nil
                connectFailure = error.description
                guard !addresses.isEmpty else { throw .connect("\(host):\(port): \(error)") }
                phase = .connecting(request, addresses: addresses)
                connectNext(request, addresses)
                return nil
            }
            if let security {
                do { stream = try security.secure(socket: socket.rawValue, as: .connecting(host: host)) } catch {
                    throw .connect("\(host):\(port): \(error)")
                }
                phase = .securing(request)
            } else {
                phase = .writing(request, offset: 0)
            }
        case .securing(let request):
            switch stream?.handshake() ?? .complete {
            case .complete: phase = .writing(request, offset: 0)
            case .wantsReadable: return .wantsReadable
            case .wantsWritable: return .wantsWritable
            case .failed(let reason): throw .connect("\(host):\(port): the TLS handshake failed: \(reason)")
            }
        case .writing(let request, let offset):
            guard let sent = try write(request.bytes, from: offset) else { return .wantsWritable }
            phase = offset + sent < request.bytes.count ? .writing(request, offset: offset + sent) : .readingHead(request)
        case .readingHead(let request):
            guard let (status, headers) = try takeHead() else { return try fill() ? nil : .wantsReadable }
            let closing = headers["connection"]?.lowercased() == "close"
            if headers["transfer-encoding"]?.lowercased() == "chunked" {
                if request.streamed {
                    phase = .streaming
                    return .streamOpened(status: status)
                }
                phase = .readingChunks(status: status, body: [], closing: closing)
            } else if request.streamed {
                throw .malformed("a stream that is not chunked")
            } else if let length = headers["content-length"].flatMap({ Int($0) }) {
                phase = .readingBody(status: status, length: length, closing: closing)
            } else {
                throw .malformed("an answer with neither a length nor chunks")
            }
        case .readingBody(let status, let length, let closing):
            guard pending.count >= length else { return try fill() ? nil : .wantsReadable }
            let body = Array(pending[..<length])
            pending.removeFirst(length)
            return finish(Response(status: status, body: body), closing: closing)
        case .readingChunks(let status, var body, let closing):
            switch try takeChunk() {
            case .data(let data)?:
                body += data
                phase = .readingChunks(status: status, body: body, closing: closing)
            case .last?: return finish(Response(status: status, body: body), closing: closing)
            case nil: return try fill() ? nil : .wantsReadable
            }
        case .streaming:
            return .wantsReadable
        }
        return nil
    }

    private func finish(_ response: Response, closing: Bool) -> Step {
        if closing { close() } else { phase = .idle }
        return .answered(response)
    }

    /// The messages of a streamed answer that have come (newline-delimited, read until the
    /// socket has no more); empty when none has.
    /// - Throws: `.broken` when the stream ends.
    func nextMessages() throws(HTTPFailure) -> [[UInt8]] {
        var messages: [[UInt8]] = []
        do throws(HTTPFailure) {
            while true {
                if let message = takeMessage() {
                    messages.append(message)
                } else if try !readStream() {
                    return messages
                }
            }
        } catch {
            if !messages.isEmpty { return messages }  // the next call says it broke
            close()
            throw error
        }
    }

    /// Moves a streamed answer on by one chunk taken or one read: whether anything moved.
    /// - Throws: `.broken` when the stream ends.
    func readStream() throws(HTTPFailure) -> Bool {
        if let chunk = try takeChunk() {
            guard case .data(let data) = chunk else { throw .broken("the stream ended") }
            streamed += data
            return true
        }
        return try fill()
    }

    /// A whole message from `streamed`, blank ones skipped.
    func takeMessage() -> [UInt8]? {
        while let newline = streamed.firstIndex(of: UInt8(ascii: "\n")) {
            let message = Array(streamed[..<newline])
            streamed.removeSubrange(...newline)
            if !message.allSatisfy({ $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: " ") }) { return message }
        }
        return nil
    }

    // MARK: The socket

    private func startConnecting(_ request: Request) {
        let addresses: [TCPSocket.Address]
        do { addresses = try TCPSocket.resolve(host, port: port) } catch {
            connectFailure = error.description
            phase = .connecting(request, addresses: [])
            return
        }
        connectNext(request, addresses)
    }

    /// Begins connecting to the first of `addresses` that does not fail at once.
    private func connectNext(_ request: Request, _ addresses: [TCPSocket.Address]) {
        var rest = addresses[...]
        while let address = rest.popFirst() {
            let made: FileDescriptor
            do { made = try TCPSocket.startConnecting(to: address) } catch {
                connectFailure = error.description
                continue
            }
            socket = made
            phase = .connecting(request, addresses: Array(rest))
            return
        }
        phase = .connecting(request, addresses: [])
    }

    /// Writes what it can of `bytes` from `offset`: how many went, `nil` when none could.
    private func write(_ bytes: [UInt8], from offset: Int) throws(HTTPFailure) -> Int? {
        guard let socket else { throw .broken("not connected") }
        let result = bytes.withUnsafeBytes { raw in
            let rest = UnsafeRawBufferPointer(rebasing: raw[offset...])
            guard let stream else { return Result { () throws(Errno) in try socket.send(rest) } }
            return Self.result(of: stream.write(rest))
        }
        switch result {
        case .success(0): throw .broken("closed by the server")
        case .success(let sent): return sent
        case .failure(let error) where error == .wouldBlock: return nil
        case .failure(let error): throw .broken(error.description)
        }
    }

    /// Reads what has come into `pending`: whether anything had.
    private func fill() throws(HTTPFailure) -> Bool {
        guard let socket else { throw .broken("not connected") }
        var chunk = [UInt8](repeating: 0, count: 16_384)
        let result = chunk.withUnsafeMutableBytes { raw in
            guard let stream else { return Result { () throws(Errno) in try socket.read(into: raw) } }
            return Self.result(of: stream.read(into: raw))
        }
        switch result {
        case .success(0): throw .broken("closed by the server")
        case .success(let count):
            pending += chunk[..<count]
            return true
        case .failure(let error) where error == .wouldBlock: return false
        case .failure(let error): throw .broken(error.description)
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
}
