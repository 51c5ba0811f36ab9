import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// Messages far larger than a read: each arrives whole and intact, up to the receiver's limit.
@Suite("Large messages over a socket")
struct LargeMessageTests {
    /// A payload whose every 4 KiB page starts with its page number, so that bytes put in
    /// the wrong place show.
    static func payload(_ size: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0xA5, count: size)
        bytes.withUnsafeMutableBytes { raw in
            for page in stride(from: 0, to: size - 3, by: 4096) {
                raw.storeBytes(of: UInt32(truncatingIfNeeded: page / 4096 + 1), toByteOffset: page, as: UInt32.self)
            }
        }
        return bytes
    }

    /// The wrapping sum of the payload's 8-byte words and its last bytes.
    static func checksum(_ bytes: [UInt8]) -> UInt64 {
        bytes.withUnsafeBytes { raw in
            var sum: UInt64 = 0
            let words = raw.count / 8
            for index in 0..<words { sum = sum &+ raw.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self) }
            for index in words * 8..<raw.count { sum = sum &+ UInt64(raw[index]) &* 31 }
            return sum
        }
    }

    /// Sizes around the large-frame threshold and up to 256 MiB, each with a small component
    /// after the large one and, on a socket, a descriptor: the receiver sees the same sizes,
    /// checksum, trailing component and descriptor count.
    @Test(arguments: [64 * 1024 - 40, 64 * 1024, 64 * 1024 + 37, (1 << 20) + 3, 16 << 20, 64 << 20, 256 << 20])
    func aLargeMessageArrivesIntact(size: Int) throws {
        let limit = (256 << 20) + 4096
        let served = ServedPort(ReceivePort(maxMessageBytes: limit)) { message in
            guard case .data(let bytes) = message.components.first, message.components.count >= 2,
                  case .data(let trailer) = message.components[1] else { return Message(id: 0) }
            let descriptors = message.components.filter { if case .descriptor = $0 { true } else { false } }.count
            for case .descriptor(let fd) in message.components { close(fd) }
            let summary = [UInt64(bytes.count), Self.checksum(bytes), UInt64(trailer.count), UInt64(descriptors)]
            return Message(id: 1, bytes: summary.withUnsafeBytes { Array($0) })
        }
        defer { served.stop() }
        let local = served.port.makeSendPort()
        let port = SendPort(adoptingSocket: try local.transferableEnd().end)
        defer { port.invalidate() }

        let bytes = Self.payload(size)
        let message = Message(id: 7, components: [.data(bytes), .data([1, 2, 3]), .descriptor(STDERR_FILENO)])
        let reply = try port.blockingRequest(message, sendTimeout: .seconds(300), receiveTimeout: .seconds(300))
        let summary = reply.bytes.withUnsafeBytes { raw in (0..<4).map { raw.loadUnaligned(fromByteOffset: $0 * 8, as: UInt64.self) } }
        #expect(reply.id == 1)
        #expect(summary == [UInt64(size), Self.checksum(bytes), 3, 1])
        // The port goes on with small messages after a large one.
        let small = try port.blockingRequest(Message(id: 8, components: [.data([9]), .data([])]), receiveTimeout: .seconds(60))
        #expect(small.id == 1)
    }

    /// A large frame is held to the wire's rules once whole: a first component whose
    /// length runs past the frame, or a frame whose last component is cut short, ends the
    /// connection (the peer reads its end) and delivers nothing; a valid one sent the same
    /// way, byte by byte in pieces, arrives.
    @Test(arguments: [("valid", 0), ("a component cut short", 1), ("a payload past the frame", 2)])
    func aLargeFrameIsCheckedWhenWhole(_ what: String, _ fault: Int) throws {
        let served = ServedPort(ReceivePort(maxMessageBytes: 1 << 20))
        defer { served.stop() }
        let (mine, theirs) = try Connection.makeSocketPair()
        defer { try? mine.close() }
        try served.port.adoptConnection(theirs)

        let payload = 70_000
        var frame = [UInt8](repeating: 0, count: 32)
        let tail: [UInt8] = fault == 1 ? [0, 9, 0, 0] : [0, 3, 0, 0, 0, 7, 8, 9]   // bytes(3): 7 8 9
        let length = 32 + 5 + payload + tail.count
        frame.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt32(0x4657_4B50).littleEndian, toByteOffset: 0, as: UInt32.self)
            raw[4] = 1                                                          // version
            raw.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: UInt32(42).littleEndian, toByteOffset: 12, as: UInt32.self)
            raw.storeBytes(of: UInt16(2).littleEndian, toByteOffset: 24, as: UInt16.self)
            raw.storeBytes(of: UInt16(0xFFFF).littleEndian, toByteOffset: 28, as: UInt16.self)
        }
        let claimed = fault == 2 ? payload + tail.count + 1 : payload
        frame += [0] + withUnsafeBytes(of: UInt32(claimed).littleEndian) { Array($0) }
        frame += Self.payload(payload) + tail
        // In pieces, as a slow peer sends it.
        var offset = 0
        while offset < frame.count {
            let piece = min(frame.count - offset, 9000)
            let sent = frame[offset..<offset + piece].withUnsafeBytes { Glibc.send(mine.rawValue, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
            #expect(sent > 0)
            offset += max(sent, 0)
        }
        if fault == 0 {
            #expect(eventually { served.received.count == 1 })
            let got = try #require(served.received.all.first)
            #expect(got.id == 42 && got.components.count == 2)
            guard case .data(let first) = got.components[0], case .data(let last) = got.components[1] else {
                Issue.record("components \(got.components)")
                return
            }
            #expect(first == Self.payload(payload) && last == [7, 8, 9])
        } else {
            // The port closes the connection: the peer reads its end.
            var byte: UInt8 = 0
            let deadline = ContinuousClock.now + .seconds(60)
            var ended = false
            while !ended, ContinuousClock.now < deadline {
                var poller = pollfd(fd: mine.rawValue, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 1000) > 0 else { continue }
                ended = recv(mine.rawValue, &byte, 1, CInt(MSG_DONTWAIT)) == 0
            }
            #expect(ended, "\(what)")
            #expect(served.received.count == 0)
        }
    }

    /// A child's port that takes messages larger than the default limit takes them on the
    /// connection it checked in on (made before the port, with the default limit): a 64 MiB
    /// message arrives, where it once closed the connection.
    @Test func aCheckedInPortTakesMessagesUpToItsOwnLimit() throws {
        let child = try WorkerChild(channel: .socket, arguments: ["--max-message-bytes", String(80 << 20)])
        defer { child.finish() }
        var bytes = Self.payload(64 << 20)
        bytes.replaceSubrange(0..<8, with: [UInt8](repeating: 0, count: 8))   // stream number 0
        try child.worker.send(Message(id: WorkerOp.stream, bytes: bytes), timeout: .seconds(300))
        let report = try child.worker.blockingRequest(Message(id: WorkerOp.streamReport), receiveTimeout: .seconds(300))
        #expect(report.text == "1 true")
    }

    /// Over a child process's socket, as the bench sends them: a large message echoed back
    /// arrives intact both ways.
    @Test func aLargeMessageCrossesToAChildAndBack() throws {
        let child = try WorkerChild(channel: .socket)
        defer { child.finish() }
        let bytes = Self.payload(4 << 20)
        let reply = try child.worker.blockingRequest(
            Message(id: WorkerOp.echo, bytes: bytes), sendTimeout: .seconds(300), receiveTimeout: .seconds(300))
        #expect(reply.bytes.count == bytes.count && Self.checksum(reply.bytes) == Self.checksum(bytes))
    }
}
