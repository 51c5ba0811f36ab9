import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

/// One way to reach an echoing receive port: each transport keeps the same limits and
/// names a refusal with the same error.
enum EchoRoute: String, CaseIterable, CustomTestStringConvertible {
    case inProcess, socket, childSocket, childPipes

    var testDescription: String { rawValue }
    var carriesDescriptors: Bool { self != .childPipes }

    /// A send port to an echoing port over this route, and what ends it.
    func open() throws -> (port: SendPort, finish: @Sendable () -> Void) {
        switch self {
        case .inProcess, .socket:
            let served = ServedPort { Message(id: $0.id, bytes: $0.bytes) }
            let local = served.port.makeSendPort()
            let port = self == .inProcess ? local : SendPort(adoptingSocket: try local.transferableEnd().end)
            return (port, { port.invalidate(); served.stop() })
        case .childSocket, .childPipes:
            let child = try WorkerChild(channel: self == .childSocket ? .socket : .pipes)
            return (child.worker, { child.finish() })
        }
    }
}

@Suite("Message limits, the same on every transport")
struct MessageLimitTests {
    /// After a refusal the port still answers.
    private func expectStillWorks(_ port: SendPort, _ route: EchoRoute) throws {
        let reply = try port.blockingRequest(Message(id: WorkerOp.echo, text: "still here"), receiveTimeout: .seconds(60))
        #expect(reply.text == "still here", "\(route)")
    }

    @Test(arguments: EchoRoute.allCases)
    func tooManyComponentsIsRefusedAtTheSender(route: EchoRoute) throws {
        let (port, finish) = try route.open()
        defer { finish() }
        let message = Message(id: WorkerOp.echo, components: Array(repeating: .data([1]), count: 2000))
        #expect(throws: PortError.tooManyComponents(count: 2000, limit: Message.maxComponents)) {
            try port.send(message, timeout: .seconds(10))
        }
        #expect(throws: PortError.tooManyComponents(count: 2000, limit: Message.maxComponents)) {
            try port.blockingRequest(message, receiveTimeout: .seconds(10))
        }
        // Exactly at the limit goes through.
        let atLimit = Message(id: WorkerOp.echo, components: Array(repeating: .data([2]), count: Message.maxComponents))
        try port.send(atLimit, timeout: .seconds(10))
        try expectStillWorks(port, route)
    }

    @Test(arguments: EchoRoute.allCases.filter(\.carriesDescriptors))
    func tooManyDescriptorsIsRefusedAtTheSender(route: EchoRoute) throws {
        let (port, finish) = try route.open()
        defer { finish() }
        let message = Message(id: WorkerOp.echo, components: Array(repeating: .descriptor(STDERR_FILENO), count: 300))
        #expect(throws: PortError.tooManyDescriptors(count: 300, limit: Message.maxDescriptors)) {
            try port.send(message, timeout: .seconds(10))
        }
        // A reply port counts too.
        var withReply = Message(id: WorkerOp.echo, components: Array(repeating: .descriptor(STDERR_FILENO), count: Message.maxDescriptors))
        withReply.replyPort = port
        #expect(throws: PortError.tooManyDescriptors(count: Message.maxDescriptors + 1, limit: Message.maxDescriptors)) {
            try port.send(withReply, timeout: .seconds(10))
        }
        try expectStillWorks(port, route)
    }

    @Test(arguments: EchoRoute.allCases.filter(\.carriesDescriptors))
    func aClosedDescriptorInAMessageIsNamedAndThePortStillWorks(route: EchoRoute) throws {
        let (port, finish) = try route.open()
        defer { finish() }
        let pipe = try FileDescriptor.pipe()
        try pipe.read.close()
        let closed = pipe.read.rawValue
        defer { try? pipe.write.close() }
        let message = Message(id: WorkerOp.echo, components: [.data([1]), .descriptor(pipe.write.rawValue), .descriptor(closed)])
        #expect(throws: PortError.invalidDescriptor(closed)) { try port.send(message, timeout: .seconds(10)) }
        try expectStillWorks(port, route)
    }

    /// A port with a smaller limit than its sender's tells it so when it takes the
    /// connection: the sender refuses the larger message itself and keeps the connection.
    @Test func theSenderLearnsTheReceiversLimitAndKeepsTheConnection() throws {
        let limit = 1024 * 1024
        let served = ServedPort(ReceivePort(maxMessageBytes: limit)) { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let port = SendPort(adoptingSocket: try served.port.makeSendPort().transferableEnd().end)
        defer { port.invalidate() }
        let tooBig = [UInt8](repeating: 3, count: 2 * limit)
        #expect(throws: PortError.messageTooLarge(size: tooBig.count, limit: limit)) {
            try port.send(Message(bytes: tooBig), timeout: .seconds(10))
        }
        #expect(throws: PortError.messageTooLarge(size: tooBig.count, limit: limit)) {
            try port.blockingRequest(Message(bytes: tooBig), receiveTimeout: .seconds(10))
        }
        #expect(port.isValid)
        let atLimit = [UInt8](repeating: 4, count: limit)
        #expect(try port.blockingRequest(Message(bytes: atLimit), receiveTimeout: .seconds(60)).bytes == atLimit)
        try expectStillWorks(port, .socket)
    }

    /// A port announces its limit on a Unix socket only when it is not the default (the
    /// default is what a peer assumes): the first frame a raw peer reads is the limits frame
    /// of a 1 MiB port, and the reply itself from a port with the default.
    @Test(arguments: [1024 * 1024, ReceivePort.defaultMaxMessageBytes])
    func aPortAnnouncesOnlyALimitOtherThanTheDefault(limit: Int) throws {
        let served = ServedPort(ReceivePort(maxMessageBytes: limit)) { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let socket = try served.port.makeSendPort().transferableEnd().end
        defer { try? socket.close() }
        let request = try WireCodec.encode(WireMessage(kind: .request, id: 7, sequence: 1, components: [.bytes([1, 2, 3])]))
        _ = try request.withUnsafeBytes { try socket.send($0) }
        let frames = try readFrames(from: socket) { $0.contains { $0.kind == .reply } }
        let expected: [WireKind] = limit == ReceivePort.defaultMaxMessageBytes ? [.reply] : [.limits, .reply]
        #expect(frames.map(\.kind) == expected)
        if limit != ReceivePort.defaultMaxMessageBytes { #expect(frames.first?.id == UInt32(limit)) }
        #expect(frames.last?.components == [.bytes([1, 2, 3])])
    }

    /// A port that adopts a blocking socket (as another process may hand one over) reads
    /// it without blocking its loop: a request on it is answered, and the loop then runs a
    /// block while the socket has nothing to read.
    @Test func aPortReadsABlockingSocketItAdoptsWithoutBlockingItsLoop() throws {
        let served = ServedPort { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let (mine, theirs) = try FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: false)
        defer { try? mine.close() }
        try served.port.adoptConnection(theirs)
        let request = try WireCodec.encode(WireMessage(kind: .request, id: 9, sequence: 1, components: [.bytes([9])]))
        _ = try request.withUnsafeBytes { try mine.send($0) }
        let reply = try readFrames(from: mine) { $0.contains { $0.kind == .reply } }.first { $0.kind == .reply }
        #expect(reply?.sequence == 1)
        #expect(reply?.components == [.bytes([9])])
        let ran = ConditionLock(false)
        try served.thread.loop.perform {
            ran.withLock { $0 = true }
            ran.broadcast()
        }
        #expect(ran.wait(until: .now + .seconds(30)) { $0 ? true : nil } == true)
    }
}
