import Glibc
@testable import NamedPortServer
import PermanentThread
import PortMessaging
import Testing
import PortKitSystem

/// The name protocol spoken without the client library's checks: requests as
/// PortMessaging messages made by hand, over a connection of the test's own.
final class RawNameClient {
    let port: SendPort

    init(address: String) throws {
        port = try SendPort.connect(to: .path(address))
    }

    /// Sends a request and returns its reply.
    func request(_ operation: NameOperation, _ fields: [MessageComponent]) throws -> Message {
        try request(rawOperation: operation.rawValue, fields)
    }

    /// Sends a request of any operation number and returns its reply.
    func request(rawOperation: UInt32, _ fields: [MessageComponent]) throws -> Message {
        try port.blockingRequest(Message(id: rawOperation, components: fields), receiveTimeout: .seconds(20))
    }

    /// Says hello asking for `version`; whether the server took it.
    func hello(_ version: UInt64 = nameProtocolVersion) throws -> Bool {
        try request(.hello, [NameField.integer(version)]).id == NameStatus.ok.rawValue
    }

    func close() {
        port.invalidate()
    }
}

/// The name protocol written byte by byte on a plain socket: for frames no client library
/// would send (too large, half sent).
final class RawNameSocket {
    private let socket: FileDescriptor
    private var splitter = WireFrameSplitter()
    private var sequence: UInt64 = 0

    init(address: String) throws {
        socket = try UnixSocket.make(nonBlocking: false)
        try UnixSocket.connect(socket, to: address)
    }

    /// The bytes of a request frame.
    func frame(_ operation: NameOperation, _ fields: [WireComponent]) throws -> [UInt8] {
        sequence += 1
        return try WireCodec.encode(WireMessage(kind: .request, id: operation.rawValue, sequence: sequence, components: fields))
    }

    /// Says hello and waits for the reply; whether the server took it.
    func hello() throws -> Bool {
        try send(frame(.hello, [.bytes(withUnsafeBytes(of: nameProtocolVersion.littleEndian) { Array($0) })]))
        return try next().id == NameStatus.ok.rawValue
    }

    /// Writes bytes as they are, whole.
    func send(_ bytes: [UInt8]) throws {
        let sent = try bytes.withUnsafeBytes { try socket.send($0) }
        #expect(sent == bytes.count)
    }

    /// The next reply the server sends, within 20 s (its announcement of its limit skipped).
    func next() throws -> WireMessage {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            if let frame = try splitter.nextFrame() {
                let message = try frame.withUnsafeBytes { try WireCodec.decode($0, descriptorCount: 0) }
                if message.kind == .limits { continue }
                return message
            }
            guard try socket.poll(CShort(POLLIN), timeout: deadline - .now) != 0 else {
                throw NameServerError.transport(.receiveTimedOut)
            }
            guard try read() > 0 else { throw NameServerError.connectionLost(address: "the test's server") }
        }
    }

    /// Whether the server closed the connection within `timeout` (EOF or a reset; what it
    /// sent before is read and dropped).
    func isClosedByServer(within timeout: Duration = .seconds(20)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard try socket.poll(CShort(POLLIN), timeout: deadline - .now) != 0 else { return false }
            guard let count = try? read(), count > 0 else { return true }
        }
        return false
    }

    private func read() throws -> Int {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(socket.rawValue, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw Errno(rawValue: errno) }
        if count > 0 { splitter.append(Array(buffer.prefix(count))) }
        return count
    }

    func close() {
        try? socket.close()
    }
}
