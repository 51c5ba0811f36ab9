import Glibc
@testable import NamedPortServer
import PermanentThread
import PortMessaging
import Testing

/// The name protocol spoken by hand, as a client of another version would.
final class RawNameClient {
    private let socket: FileDescriptor
    private var reader = FrameReader()
    private var pending: [IncomingFrame] = []
    private var sequence: UInt64 = 0

    init(address: String) throws {
        socket = try UnixSocket.make(nonBlocking: false)
        try UnixSocket.connect(socket, to: address)
    }

    /// Sends a request and returns the next frame (its reply, as nothing else is waiting).
    func request(_ operation: NameOperation, _ components: [WireComponent]) throws -> IncomingFrame {
        try sendRaw(operation, components)
        return try next()
    }

    /// Says hello asking for `version`; whether the server took it.
    func hello(_ version: UInt64 = nameProtocolVersion) throws -> Bool {
        try request(.hello, [NameField.integer(version)]).message.id == NameStatus.ok.rawValue
    }

    /// Sends a request without waiting for anything.
    func sendRaw(_ operation: NameOperation, _ components: [WireComponent]) throws {
        sequence += 1
        let frame = try WireMessage(kind: .request, id: operation.rawValue, sequence: sequence, components: components).frame()
        try send(frame.bytes)
    }

    /// Writes bytes as they are, whole.
    func send(_ bytes: [UInt8]) throws {
        let sent = try bytes.withUnsafeBytes { try socket.send($0) }
        #expect(sent == bytes.count)
    }

    /// Whether the server closed the connection within `timeout` (EOF or a reset; frames
    /// it sent before are read and dropped).
    func isClosedByServer(within timeout: Duration = .seconds(20)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard try socket.poll(CShort(POLLIN), timeout: deadline - .now) != 0 else { return false }
            let (frames, end) = reader.read(from: socket)
            for frame in frames { closeDescriptors(frame.descriptors) }
            if end != nil { return true }
        }
        return false
    }

    /// The next frame the server sends, within 20 s.
    func next() throws -> IncomingFrame {
        let deadline = ContinuousClock.now + .seconds(20)
        while pending.isEmpty {
            guard try socket.poll(CShort(POLLIN), timeout: deadline - .now) != 0 else {
                throw NameServerError.timedOut(operation: "a frame from the server")
            }
            let (frames, end) = reader.read(from: socket)
            pending += frames
            if pending.isEmpty, end != nil { throw NameServerError.connectionLost(address: "the test's server") }
        }
        return pending.removeFirst()
    }

    func close() {
        for frame in pending { closeDescriptors(frame.descriptors) }
        reader.discard()
        try? socket.close()
    }
}
