import Dispatch
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem

/// Ports reached over plain TCP on loopback: peers as with a Unix socket address, only
/// bytes travel, plain TCP only when asked for and only on loopback, and faults typed.
@Suite("TCP ports")
struct TCPPortTests {
    /// What a port's peer observer saw, in order.
    enum Seen: Equatable {
        case connected(UInt64)
        case disconnected(UInt64, PortError)
    }

    /// A port on a loop thread of its own, listening on 127.0.0.1 at a port the kernel
    /// chose, recording its peers' events.
    final class TCPServedPort: Sendable {
        let served: ServedPort
        let events = Recorder<PeerEvent>()
        let port: UInt16

        init(host: String = "127.0.0.1", reply: @escaping @Sendable (Message) -> Message? = { Message(id: $0.id, text: "answer to \($0.text)") }) throws {
            served = ServedPort(reply: reply)
            let events = self.events
            served.port.onPeerEvent { events.append($0) }
            try served.port.listen(at: .tcp(host: host, port: 0), security: .plainLoopbackOnly)
            guard case .tcp(let listeningHost, let chosen)? = served.port.listeningAddress, listeningHost == host, chosen != 0 else {
                throw PortError.noListener("the listening address names no chosen port")
            }
            port = chosen
        }

        /// The peers that connected, in order.
        var peers: [PortPeer] { events.all.compactMap { if case .connected(let peer) = $0 { peer } else { nil } } }

        /// The events so far, by peer id.
        var seen: [Seen] {
            events.all.map { event in
                switch event {
                case .connected(let peer): .connected(peer.id)
                case .disconnected(let peer, let reason): .disconnected(peer.id, reason)
                }
            }
        }

        var address: PortAddress { .tcp(host: "127.0.0.1", port: port) }

        func stop() { served.stop() }
    }

    @Test func aPortOnLoopbackAnswersRequestsAndNamesItsPeersAddress() throws {
        let server = try TCPServedPort()
        defer { server.stop() }
        let port = try SendPort.connect(to: server.address, security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        #expect(port.remoteAddress == "127.0.0.1:\(server.port)")
        #expect(port.remoteCredentials == nil)
        #expect(try port.blockingRequest(Message(id: 1, text: "first"), receiveTimeout: .seconds(30)).text == "answer to first")
        try port.send(Message(id: 2, text: "one-way"), timeout: .seconds(10))
        #expect(try port.blockingRequest(Message(id: 3, text: "third"), receiveTimeout: .seconds(30)).text == "answer to third")
        #expect(eventually { server.served.received.count == 3 })
        // In order, none with a sender (the kernel names none over TCP), all from one peer.
        let received = server.served.received.all
        #expect(received.map(\.text) == ["first", "one-way", "third"])
        #expect(received.allSatisfy { $0.sender == nil })
        let peer = try #require(server.peers.first)
        #expect(received.allSatisfy { $0.peer === peer })
        #expect(peer.credentials == nil)
        let remote = try #require(peer.remoteAddress)
        #expect(remote.hasPrefix("127.0.0.1:") && remote != "127.0.0.1:\(server.port)")

        // Ending the peer from the listening side: the sender sees its port die.
        peer.disconnect()
        #expect(eventually { server.seen == [.connected(peer.id), .disconnected(peer.id, .invalidPort)] })
        #expect(throws: PortError.peerDied) { try port.blockingRequest(Message(id: 4, text: "late"), receiveTimeout: .seconds(30)) }
    }

    /// A message far larger than a socket buffer goes out in many writes and comes back
    /// whole, both ways.
    @Test func aLargeMessageCrossesWhole() throws {
        let server = try TCPServedPort { Message(id: $0.id, bytes: $0.bytes.reversed()) }
        defer { server.stop() }
        let port = try SendPort.connect(to: server.address, security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        let bytes = (0..<(3 * 1024 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let reply = try port.blockingRequest(Message(id: 9, bytes: bytes), sendTimeout: .seconds(60), receiveTimeout: .seconds(60))
        #expect(reply.bytes == Array(bytes.reversed()))
        #expect(server.served.received.all.map(\.bytes.count) == [bytes.count])
    }

    @Test func addressesReadAsHostAndPort() {
        #expect(PortAddress.tcp(host: "::1", port: 80).description == "[::1]:80")
        #expect(PortAddress.tcp(host: "127.0.0.1", port: 80).description == "127.0.0.1:80")
    }

    /// Whether this machine has IPv6 loopback (a container may have none).
    static let hasIPv6Loopback: Bool = {
        guard let address = try? TCPSocket.resolve("::1", port: 0).first, let (socket, _) = try? TCPSocket.listen(at: address) else {
            return false
        }
        try? socket.close()
        return true
    }()

    @Test(.enabled(if: hasIPv6Loopback, "no IPv6 loopback here"))
    func aPortListensOnIPv6Loopback() throws {
        let server = try TCPServedPort(host: "::1")
        defer { server.stop() }
        let port = try SendPort.connect(to: .tcp(host: "::1", port: server.port), security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        #expect(port.remoteAddress == "[::1]:\(server.port)")
        #expect(try port.blockingRequest(Message(id: 1, text: "six"), receiveTimeout: .seconds(30)).text == "answer to six")
        #expect(server.peers.first?.remoteAddress?.hasPrefix("[::1]:") == true)
    }

    @Test func anotherProcessConnectsAndTalksBothWays() throws {
        let server = try TCPServedPort { $0.id == 1 ? Message(id: 1, text: "hi") : nil }
        defer { server.stop() }
        let (status, output) = try ChildProcess.run("port-tcp", ["\(server.port)"])
        #expect(status == 0, "helper said: \(output)")
        let fields = keyValueFields(output)
        #expect(fields["reply"] == "hi", "helper said: \(output)")
        #expect(fields["sender"] == "-1", "over TCP the reply names no sender: \(output)")
        #expect(eventually { server.served.received.count == 4 })
        #expect(server.served.received.all.map(\.text) == ["hello", "one-way 1", "one-way 2", "one-way 3"])
        #expect(server.served.received.all.allSatisfy { $0.sender == nil })
        // The child exited: its peer is seen gone after its last message.
        let peer = try #require(server.peers.first)
        #expect(eventually { server.seen == [.connected(peer.id), .disconnected(peer.id, .peerDied)] })
    }

    @Test func aKilledPeerFailsItsSendersAndRequestsAndIsSeenGone() throws {
        let server = try TCPServedPort { $0.id == 1 ? Message(id: 1, text: "hi") : nil }
        defer { server.stop() }
        let child = try SpawnedProcess.helper("port-tcp", ["\(server.port)", "stay"])
        defer { child.kill() }
        let line = try child.readLine(within: .seconds(60))
        let childPort = try #require(keyValueFields(line)["port"].flatMap { UInt16($0) }, "helper said: \(line)")
        #expect(eventually { server.served.received.count == 4 })
        let peer = try #require(server.peers.first)

        let port = try SendPort.connect(to: .tcp(host: "127.0.0.1", port: childPort), security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        #expect(try port.blockingRequest(Message(id: 1, text: "ping"), receiveTimeout: .seconds(30)).text == "pong")
        // A request the child keeps unanswered, waited for on another thread.
        let pending = Recorder<Result<Message, PortError>>()
        let waiter = LoopThread(name: "tcp-waiter") { _ in
            pending.append(Result { () throws(PortError) in try port.blockingRequest(Message(id: 2, text: "held"), receiveTimeout: .seconds(120)) })
        }
        #expect(try child.readLine(within: .seconds(60)) == "kept")

        child.kill()
        #expect(waiter.join(timeout: .seconds(60)))
        #expect(pending.all.count == 1)
        if case .failure(let error)? = pending.all.first { #expect(error == .peerDied) } else { Issue.record("the held request got \(pending.all)") }
        #expect(throws: PortError.peerDied) { try port.send(Message(id: 3, text: "after"), timeout: .seconds(10)) }
        #expect(eventually { server.seen == [.connected(peer.id), .disconnected(peer.id, .peerDied)] })
        #expect(!peer.isConnected)
    }

    @Test func descriptorsAndPortsAreRefusedBeforeTheyLeave() throws {
        let server = try TCPServedPort()
        defer { server.stop() }
        let port = try SendPort.connect(to: server.address, security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        let local = ReceivePort()
        defer { local.invalidate() }
        var withDescriptor = Message(id: 1, text: "a descriptor")
        withDescriptor.components.append(.descriptor(STDERR_FILENO))
        #expect(throws: PortError.cannotCrossHosts("a file descriptor")) { try port.send(withDescriptor, timeout: .seconds(10)) }
        var withPort = Message(id: 1, text: "a port")
        withPort.components.append(.port(local.makeSendPort()))
        #expect(throws: PortError.cannotCrossHosts("a port")) { try port.send(withPort, timeout: .seconds(10)) }
        #expect(throws: PortError.cannotCrossHosts("a port")) { try port.blockingRequest(withPort, receiveTimeout: .seconds(10)) }
        let withReplyPort = Message(id: 1, text: "a reply port", replyPort: local.makeSendPort())
        #expect(throws: PortError.cannotCrossHosts("a reply port")) { try port.send(withReplyPort, timeout: .seconds(10)) }
        #expect(throws: PortError.cannotCrossHosts("a reply port")) { try port.blockingRequest(withReplyPort, receiveTimeout: .seconds(10)) }
        // Nor can the TCP port itself travel to another process: its receiver is on the
        // other end of the TCP connection.
        let unix = SendPort(adoptingSocket: try local.makeSendPort().transferableEnd().end)
        defer { unix.invalidate() }
        #expect(throws: PortError.cannotCrossHosts("a port reached over TCP")) {
            try unix.send(Message(id: 1, components: [.port(port)]), timeout: .seconds(10))
        }
        // Nothing went, and the connection is still good.
        #expect(try port.blockingRequest(Message(id: 2, text: "bytes"), receiveTimeout: .seconds(30)).text == "answer to bytes")
        #expect(server.served.received.all.map(\.text) == ["bytes"])
        #expect(port.isValid)
    }

    @Test func aReplyCarryingAPortEndsTheRequestWithNoReply() throws {
        let local = ReceivePort()
        defer { local.invalidate() }
        let server = try TCPServedPort { _ in Message(id: 1, components: [.port(local.makeSendPort())]) }
        defer { server.stop() }
        let port = try SendPort.connect(to: server.address, security: .plainLoopbackOnly, timeout: .seconds(30))
        defer { port.invalidate() }
        #expect(throws: PortError.noReply) { try port.blockingRequest(Message(id: 1, text: "give a port"), receiveTimeout: .seconds(30)) }
        #expect(port.isValid)
    }

    @Test func plainTCPIsOnlyForLoopbackAndOnlyWhenAskedFor() throws {
        let port = ReceivePort()
        defer { port.invalidate() }
        for host in ["0.0.0.0", "::", "192.0.2.1"] {
            #expect(throws: PortError.self) { try port.listen(at: .tcp(host: host, port: 0), security: .plainLoopbackOnly) }
            do {
                try port.listen(at: .tcp(host: host, port: 0), security: .plainLoopbackOnly)
            } catch {
                guard case .plainTCPRefused(let address, _) = error else { Issue.record("listening at \(host): \(error)"); continue }
                #expect(address == PortAddress.tcp(host: host, port: 0).description)
            }
            do {
                _ = try SendPort.connect(to: .tcp(host: host, port: 9), security: .plainLoopbackOnly, timeout: .seconds(30))
                Issue.record("connected to \(host)")
            } catch {
                guard case .plainTCPRefused = error else { Issue.record("connecting to \(host): \(error)"); continue }
            }
        }
        #expect(port.listeningAddress == nil)
        // Without asking for it, not even loopback.
        let loopback = PortAddress.tcp(host: "127.0.0.1", port: 0)
        #expect(throws: PortError.plainTCPRefused(address: "127.0.0.1:0", reason: TCPSecurity.notAskedFor)) { try port.listen(at: loopback) }
        #expect(throws: PortError.plainTCPRefused(address: "127.0.0.1:0", reason: TCPSecurity.notAskedFor)) {
            try SendPort.connect(to: loopback)
        }
    }

    @Test func aClosedPortIsRefusedTypedAndAtOnce() throws {
        // Not scheduled, so its invalidation closes the listening socket at once.
        let closed = ReceivePort()
        try closed.listen(at: .tcp(host: "127.0.0.1", port: 0), security: .plainLoopbackOnly)
        let address = try #require(closed.listeningAddress)
        closed.invalidate()
        // A refusal, not the timeout: the host answered that nothing listens.
        #expect(throws: PortError.noListener(address.description)) {
            try SendPort.connect(to: address, security: .plainLoopbackOnly, timeout: .seconds(120))
        }
        do {
            _ = try SendPort.connect(to: .tcp(host: "no-such-host.invalid", port: 1), security: .plainLoopbackOnly)
            Issue.record("connected to a host that does not exist")
        } catch {
            guard case .unreachable(let target, _) = error else { Issue.record("\(error)"); return }
            #expect(target == "no-such-host.invalid:1")
        }
    }

    /// A listener whose backlog is full (it is never scheduled, so nothing accepts) drops
    /// the handshakes past it: the connect that gets no answer fails at its timeout.
    @Test func aHandshakeWithoutAnswerIsUnreachableAtTheTimeout() throws {
        let full = ReceivePort()
        defer { full.invalidate() }
        try full.listen(at: .tcp(host: "127.0.0.1", port: 0), security: .plainLoopbackOnly, backlog: 1)
        let address = try #require(full.listeningAddress)
        var connected: [SendPort] = []
        defer { for port in connected { port.invalidate() } }
        var failure: PortError?
        for _ in 0..<16 where failure == nil {
            do { connected.append(try SendPort.connect(to: address, security: .plainLoopbackOnly, timeout: .seconds(2))) } catch {
                failure = error
            }
        }
        guard case .unreachable(let target, _)? = failure else {
            Issue.record("\(connected.count) connected, then \(failure.map { "\($0)" } ?? "no failure")")
            return
        }
        #expect(target == address.description)
        #expect(!connected.isEmpty)
    }

    /// Bytes no PortKit peer would send, on a raw TCP connection to a listening port.
    @Test(arguments: ["bad magic", "truncated component"])
    func aMalformedFrameClosesTheConnection(_ fault: String) throws {
        let server = try TCPServedPort()
        defer { server.stop() }
        let addresses = try TCPSocket.resolve("127.0.0.1", port: server.port)
        let socket = try TCPSocket.connect(to: addresses[0], deadline: .now + .seconds(30))
        defer { try? socket.close() }
        var frame = try WireCodec.encode(WireMessage(kind: .message, id: 7, components: [.bytes(Array("hello".utf8))]))
        if fault == "bad magic" {
            frame[0] ^= 0xFF
        } else {
            // The frame says it ends two bytes into its component's five.
            frame.removeLast(3)
            let length = UInt32(frame.count)
            frame.withUnsafeMutableBytes { $0.storeBytes(of: length.littleEndian, toByteOffset: WireLayout.lengthOffset, as: UInt32.self) }
        }
        #expect(frame.withUnsafeBytes { try? socket.send($0) } == frame.count)
        #expect(eventually {
            guard let last = server.seen.last, case .disconnected(_, .malformed) = last else { return false }
            return true
        })
        #expect(server.seen.count == 2)
        #expect(server.served.received.count == 0)
    }
}
