import Glibc

/// A D-Bus client connection in raw bytes, as little as a peer of a bus does to exist on it:
/// SASL `EXTERNAL` (the bus takes the user from the socket's credentials), then the
/// `Hello` call, whose reply gives it its unique name. No library: the bench needs the
/// connection, not messages on it.
struct RawDBusClient {
    /// The connected socket.
    let socket: CInt

    /// Connects to the bus listening at `path`, authenticates and says hello; returns once
    /// the bus has answered the hello.
    /// - Throws: `BenchmarkError.system` when the bus refuses or the connection fails, with
    ///   what the bus said; `.timedOut` when it does not answer within 10 s.
    init(connectingTo path: String) throws(BenchmarkError) {
        let socket = RawSockets.connect(to: path)
        guard socket >= 0 else { throw .lastSystemError("connect \(path)") }
        do throws(BenchmarkError) {
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            guard setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
                throw .lastSystemError("setsockopt(SO_RCVTIMEO)")
            }
            // The credentials byte, then EXTERNAL without an identity: the bus asks for data,
            // an empty answer lets it take the socket's user (in a user namespace too).
            try Self.send(socket, [0] + Array("AUTH EXTERNAL\r\n".utf8))
            try Self.expect(socket, "DATA")
            try Self.send(socket, Array("DATA\r\n".utf8))
            try Self.expect(socket, "OK ")
            try Self.send(socket, Array("BEGIN\r\n".utf8) + Self.hello)
            try Self.readHelloReply(socket)
        } catch {
            Glibc.close(socket)
            throw error
        }
        self.socket = socket
    }

    /// Closes the connection.
    func close() { Glibc.close(socket) }

    // MARK: The bytes

    /// `org.freedesktop.DBus.Hello`, serial 1, no body, little-endian (D-Bus specification,
    /// "Message Format"): the 12-byte fixed header, then the header fields, an array of
    /// (code, variant) structures each aligned to 8, then padding to 8.
    static let hello: [UInt8] = {
        let fields: [(code: UInt8, signature: UInt8, value: String)] = [
            (1, UInt8(ascii: "o"), "/org/freedesktop/DBus"),  // PATH
            (6, UInt8(ascii: "s"), "org.freedesktop.DBus"),  // DESTINATION
            (2, UInt8(ascii: "s"), "org.freedesktop.DBus"),  // INTERFACE
            (3, UInt8(ascii: "s"), "Hello"),  // MEMBER
        ]
        func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        var message: [UInt8] = [UInt8(ascii: "l"), 1, 0, 1] + le32(0) + le32(1) + le32(0)
        func pad(_ alignment: Int) { while message.count % alignment != 0 { message.append(0) } }
        for field in fields {
            pad(8)
            message += [field.code, 1, field.signature, 0]
            pad(4)
            message += le32(field.value.utf8.count) + Array(field.value.utf8) + [0]
        }
        // The array's length counts from its first element (offset 16, already aligned) to
        // the end of its last; the padding after it does not count.
        let length = le32(message.count - 16)
        message.replaceSubrange(12..<16, with: length)
        pad(8)
        return message
    }()

    private static func send(_ socket: CInt, _ bytes: [UInt8]) throws(BenchmarkError) {
        guard bytes.withUnsafeBytes({ RawIO.writeAll(socket, $0) }) else { throw .lastSystemError("write to the bus") }
    }

    /// Reads one SASL line and checks that it starts with `prefix`.
    private static func expect(_ socket: CInt, _ prefix: String) throws(BenchmarkError) {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while !(line.count >= 2 && line.suffix(2) == [13, 10]) {
            errno = 0
            guard read(socket, &byte, 1) == 1 else { throw readFailure("the bus's SASL answer") }
            line.append(byte)
        }
        let text = String(decoding: line.dropLast(2), as: UTF8.self)
        guard text.hasPrefix(prefix) else { throw .system(operation: "SASL: the bus said '\(text)', not '\(prefix)…'", errno: 0) }
    }

    /// Reads the first message, which must be the hello's reply (METHOD_RETURN).
    private static func readHelloReply(_ socket: CInt) throws(BenchmarkError) {
        var header = [UInt8](repeating: 0, count: 16)
        errno = 0
        guard header.withUnsafeMutableBytes({ RawIO.readAll(socket, $0) }) else { throw readFailure("the hello's reply") }
        let little = header[0] == UInt8(ascii: "l")
        func u32(_ at: Int) -> Int {
            (0..<4).reduce(0) { sum, index in sum | Int(header[at + index]) << (8 * (little ? index : 3 - index)) }
        }
        let fieldsLength = (u32(12) + 7) & ~7
        var rest = [UInt8](repeating: 0, count: fieldsLength + u32(4))
        guard rest.withUnsafeMutableBytes({ RawIO.readAll(socket, $0) }) else { throw readFailure("the hello's reply") }
        guard header[1] == 2 else { throw .system(operation: "Hello: the bus answered with a message of type \(header[1])", errno: 0) }
    }

    /// Why a read of `what` came short: a timeout, an error, or (errno still 0) the bus
    /// closed the connection.
    private static func readFailure(_ what: String) -> BenchmarkError {
        switch errno {
        case EAGAIN, EWOULDBLOCK: .timedOut("\(what) within 10 s")
        case 0: .system(operation: "read \(what): the bus closed the connection", errno: 0)
        default: .lastSystemError("read \(what)")
        }
    }
}
