import Foundation
import Glibc
import PermanentThread
import PortCluster
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem

/// Ports over TCP secured by the cluster's TLS: messages both ways, the peers named by
/// their certificates, the refusals of strangers on either side, and the port serving on
/// while they are refused.
@Suite("Secured TCP ports (ClusterTLS)")
struct SecuredPortTests {
    /// A directory of certificates for nodes a, b and c.
    final class Fixture: Sendable {
        let directory = TestDirectory()
        let certificates: TestCertificates

        init() throws {
            certificates = try TestCertificates.make(nodes: ["a", "b", "c"], in: directory)
        }
    }

    /// A secured connection to `server` as `security` says.
    private func connect(_ server: SecuredServer, as security: ClusterTLS) throws(PortError) -> SendPort {
        try SendPort.connect(to: server.address, security: .secured(by: security), timeout: .seconds(60))
    }

    /// The reason a connection to `server` as `security` is refused with `handshakeFailed`
    /// (an issue is recorded for any other outcome), and the address it names.
    private func refusal(_ server: SecuredServer, as security: ClusterTLS) -> (address: String, reason: String)? {
        do throws(PortError) {
            let port = try connect(server, as: security)
            port.invalidate()
            Issue.record("the connection was accepted")
        } catch {
            guard case .handshakeFailed(let address, let reason) = error else {
                Issue.record("refused with \(error), not handshakeFailed")
                return nil
            }
            return (address, reason)
        }
        return nil
    }

    @Test func requestsAndOneWayMessagesCrossAndEachSideNamesTheOther() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        #expect(port.remoteIdentity == "a")
        #expect(port.remoteAddress == "127.0.0.1:\(server.number)")
        #expect(try port.blockingRequest(Message(id: 1, text: "first"), receiveTimeout: .seconds(60)).text == "answer to first")
        try port.send(Message(id: 2, text: "one-way 1"), timeout: .seconds(30))
        try port.send(Message(id: 3, text: "one-way 2"), timeout: .seconds(30))
        #expect(try port.blockingRequest(Message(id: 4, text: "last"), receiveTimeout: .seconds(60)).text == "answer to last")
        #expect(eventually(timeout: .seconds(60)) { server.received.count == 4 })
        let received = server.received.all
        #expect(received.map(\.text) == ["first", "one-way 1", "one-way 2", "last"])
        #expect(received.allSatisfy { $0.sender == nil })
        let peer = try #require(server.peers.first)
        #expect(server.peers.count == 1)
        #expect(received.allSatisfy { $0.peer === peer })
        #expect(peer.remoteIdentity == "b")
        #expect(peer.credentials == nil)
        #expect(peer.remoteAddress?.hasPrefix("127.0.0.1:") == true)
        #expect(peer.description.contains("b from 127.0.0.1:"))
    }

    /// Async requests, whose replies the shared reply loop reads from the secured
    /// connection, each get their own answer.
    @Test func asyncRequestsGetTheirAnswers() async throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        let answers = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await port.request(Message(id: UInt32(index), text: "async \(index)"), receiveTimeout: .seconds(60)).text
                }
            }
            var all: [String] = []
            for try await answer in group { all.append(answer) }
            return all
        }
        #expect(answers.sorted() == (0..<8).map { "answer to async \($0)" }.sorted())
    }

    /// A plain client at a secured port, and a secured client at a plain port: neither
    /// gets a message through, and the secured server serves a member afterwards.
    @Test func plainAndSecuredSidesDoNotMix() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let plain = try SendPort.connect(to: server.address, security: .plainLoopbackOnly, timeout: .seconds(60))
        defer { plain.invalidate() }
        #expect(throws: PortError.peerDied) { try plain.blockingRequest(Message(id: 1, text: "plain"), receiveTimeout: .seconds(60)) }
        let plainServer = try SecuredServer(security: .plainLoopbackOnly)
        defer { plainServer.stop() }
        let refused = try #require(refusal(plainServer, as: try fixture.certificates.tls("b")))
        #expect(refused.address == "127.0.0.1:\(plainServer.number)")
        let member = try connect(server, as: try fixture.certificates.tls("b"))
        defer { member.invalidate() }
        #expect(try member.blockingRequest(Message(id: 2, text: "member"), receiveTimeout: .seconds(60)).text == "answer to member")
        #expect(server.received.all.map(\.text) == ["member"])
        #expect(plainServer.received.all.isEmpty)
    }

    /// A child process connects as node b: each side names the other, and the child's
    /// messages arrive in order before its peer is seen gone.
    @Test func anotherProcessConnectsSecuredAndIsNamed() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let b = try #require(fixture.certificates.nodes["b"])
        let (status, output) = try ChildProcess.run(
            "port-tls", ["\(server.number)", b.certificate, b.privateKey, fixture.certificates.authority])
        #expect(status == 0, "helper said: \(output)")
        #expect(output.contains("reply=answer to hello identity=a"), "helper said: \(output)")
        #expect(eventually(timeout: .seconds(60)) { server.received.count == 4 })
        #expect(server.received.all.map(\.text) == ["hello", "one-way 1", "one-way 2", "one-way 3"])
        let peer = try #require(server.peers.first)
        #expect(peer.remoteIdentity == "b")
        #expect(eventually(timeout: .seconds(60)) { !peer.isConnected })
        let ends = server.events.all.compactMap { if case .disconnected(let gone, let reason) = $0 { (gone.id, reason) } else { nil } }
        #expect(ends.map(\.0) == [peer.id])
        #expect(ends.map(\.1) == [.peerDied])
    }

    /// A message far larger than a record (and than a socket buffer) goes out in many
    /// records and comes back whole, both ways.
    @Test func aLargeMessageCrossesWholeBothWays() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a"))) {
            Message(id: $0.id, bytes: $0.bytes.reversed())
        }
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        let bytes = (0..<(1024 * 1024 + 17)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        let reply = try port.blockingRequest(Message(id: 9, bytes: bytes), sendTimeout: .seconds(60), receiveTimeout: .seconds(120))
        #expect(reply.bytes == Array(bytes.reversed()))
        #expect(server.received.all.map(\.bytes) == [bytes])
    }

    /// Several threads request on one connection at once while the server's loop reads and
    /// writes it: each gets its own answer (the TLS state is never used by two at once).
    @Test func concurrentRequestsOnOneConnectionEachGetTheirAnswer() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a"))) {
            Message(id: $0.id, bytes: $0.bytes + $0.bytes)
        }
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        let answers = Recorder<Bool>()
        let threads = (0..<4).map { thread in
            LoopThread(name: "requester-\(thread)") { _ in
                for round in 0..<25 {
                    let bytes = [UInt8](repeating: UInt8(thread * 25 + round), count: 40_000 + thread * 1000)
                    let reply = try? port.blockingRequest(Message(id: UInt32(round), bytes: bytes), sendTimeout: .seconds(60), receiveTimeout: .seconds(120))
                    answers.append(reply?.bytes == bytes + bytes)
                }
            }
        }
        for thread in threads { #expect(thread.join(timeout: .seconds(300))) }
        #expect(answers.count == 100)
        #expect(answers.all.allSatisfy { $0 })
    }

    /// A client whose certificate another authority issued (trusting both, so that only
    /// the server can refuse) is refused with a typed error; the server serves a member
    /// of the cluster before and after, and never counts the stranger among its peers.
    @Test func aClientFromAnotherAuthorityIsRefusedAndTheServerServesOn() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let member = try connect(server, as: try fixture.certificates.tls("b"))
        defer { member.invalidate() }
        #expect(try member.blockingRequest(Message(id: 1, text: "before"), receiveTimeout: .seconds(60)).text == "answer to before")

        let stranger = try fixture.certificates.foreignTLS("c", trustingBoth: true)
        let refused = try #require(refusal(server, as: stranger))
        #expect(refused.address == "127.0.0.1:\(server.number)")
        #expect(refused.reason.contains("unknown ca"), "reason: \(refused.reason)")
        #expect(try member.blockingRequest(Message(id: 2, text: "after"), receiveTimeout: .seconds(60)).text == "answer to after")
        let latecomer = try connect(server, as: try fixture.certificates.tls("c"))
        defer { latecomer.invalidate() }
        #expect(try latecomer.blockingRequest(Message(id: 3, text: "late"), receiveTimeout: .seconds(60)).text == "answer to late")
        #expect(eventually(timeout: .seconds(60)) { server.peers.count == 2 })
        #expect(server.peers.map(\.remoteIdentity) == ["b", "c"])
        #expect(server.received.all.map(\.text) == ["before", "after", "late"])
    }

    /// A server whose certificate another authority issued is refused by the client
    /// before anything is sent.
    @Test func aServerFromAnotherAuthorityIsRefusedByTheClient() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.foreignTLS("a")))
        defer { server.stop() }
        let refused = try #require(refusal(server, as: try fixture.certificates.tls("b")))
        #expect(refused.address == "127.0.0.1:\(server.number)")
        #expect(refused.reason.contains("certificate was refused"), "reason: \(refused.reason)")
        #expect(server.peers.isEmpty)
        #expect(server.received.all.isEmpty)
    }

    /// A client presenting no certificate at all is refused by the server (TLS 1.3's
    /// "certificate required" alert), which serves a member afterwards.
    @Test func aClientWithoutACertificateIsRefused() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let outcome = try RawTLSClient.connectWithoutCertificate(port: server.number, authority: fixture.certificates.authority)
        guard case .refusedAfterHandshake(let reason) = outcome else {
            Issue.record("a client without a certificate got \(outcome)")
            return
        }
        #expect(reason.contains("certificate required"), "reason: \(reason)")
        let member = try connect(server, as: try fixture.certificates.tls("b"))
        defer { member.invalidate() }
        #expect(try member.blockingRequest(Message(id: 1, text: "member"), receiveTimeout: .seconds(60)).text == "answer to member")
        #expect(server.peers.map(\.remoteIdentity) == ["b"])
    }

    /// A peer that connects and never speaks holds no thread: members are served
    /// meanwhile, and the server closes it at its handshake's deadline.
    @Test func aSilentClientIsClosedAtTheHandshakeDeadlineWhileOthersAreServed() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let address = try #require(try TCPSocket.resolve("127.0.0.1", port: server.number).first)
        let silent = try TCPSocket.connect(to: address, deadline: .now + .seconds(60))
        defer { try? silent.close() }
        let member = try connect(server, as: try fixture.certificates.tls("b"))
        defer { member.invalidate() }
        #expect(try member.blockingRequest(Message(id: 1, text: "meanwhile"), receiveTimeout: .seconds(60)).text == "answer to meanwhile")
        // The server ends the silent connection: its end reads as the end of the stream.
        let ready = try silent.poll(CShort(POLLIN), timeout: ReceivePort.handshakeTimeout + .seconds(60))
        #expect(ready != 0)
        var byte: UInt8 = 0
        #expect(recv(silent.rawValue, &byte, 1, CInt(MSG_DONTWAIT)) == 0)
        #expect(server.peers.map(\.remoteIdentity) == ["b"])
    }

    @Test func descriptorsAndPortsAreRefusedBeforeTheyLeave() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        let local = ReceivePort()
        defer { local.invalidate() }
        var withDescriptor = Message(id: 1, text: "a descriptor")
        withDescriptor.components.append(.descriptor(STDERR_FILENO))
        #expect(throws: PortError.cannotCrossHosts("a file descriptor")) { try port.send(withDescriptor, timeout: .seconds(10)) }
        var withPort = Message(id: 1, text: "a port")
        withPort.components.append(.port(local.makeSendPort()))
        #expect(throws: PortError.cannotCrossHosts("a port")) { try port.blockingRequest(withPort, receiveTimeout: .seconds(10)) }
        let withReplyPort = Message(id: 1, text: "a reply port", replyPort: local.makeSendPort())
        #expect(throws: PortError.cannotCrossHosts("a reply port")) { try port.send(withReplyPort, timeout: .seconds(10)) }
        // Nothing went, and the connection is still good.
        #expect(try port.blockingRequest(Message(id: 2, text: "bytes"), receiveTimeout: .seconds(60)).text == "answer to bytes")
        #expect(server.received.all.map(\.text) == ["bytes"])
    }

    /// The server's port goes away: the next request and the sends after it fail with
    /// `peerDied`.
    @Test func aClosedServerFailsItsSendersWithPeerDied() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        #expect(try port.blockingRequest(Message(id: 1, text: "ping"), receiveTimeout: .seconds(60)).text == "answer to ping")
        let peer = try #require(server.peers.first)
        server.stop()
        #expect(!peer.isConnected)
        #expect(throws: PortError.peerDied) { try port.blockingRequest(Message(id: 2, text: "gone?"), receiveTimeout: .seconds(60)) }
        #expect(throws: PortError.peerDied) { try port.send(Message(id: 3, text: "after"), timeout: .seconds(10)) }
        #expect(!port.isValid || port.remoteAddress == nil)
        #expect(server.received.all.map(\.text) == ["ping"])
    }

    /// The TLS stream writes through the System layer: an interrupted write is made again,
    /// and a reset the kernel reports fails the send with `peerDied`.
    @Test func theTLSStreamsWritesGoThroughTheSystemLayer() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        let (_, interrupted) = try FaultSeam.injecting(.failure(.interrupted), on: .send, times: 2) {
            try port.send(Message(id: 1, text: "interrupted"), timeout: .seconds(30))
        }
        #expect(interrupted == 2)
        #expect(eventually(timeout: .seconds(60)) { server.received.count == 1 })
        let (_, reset) = FaultSeam.injecting(.failure(.connectionReset), on: .send) {
            #expect(throws: PortError.peerDied) { try port.send(Message(id: 2, text: "reset"), timeout: .seconds(10)) }
        }
        #expect(reset == 1)
    }

    /// Secured, a port listens on any address (plain TCP listens on loopback only).
    @Test func aSecuredPortListensBeyondLoopback() throws {
        let fixture = try Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")), host: "0.0.0.0")
        defer { server.stop() }
        #expect(server.port.listeningAddress == .tcp(host: "0.0.0.0", port: server.number))
        let port = try connect(server, as: try fixture.certificates.tls("b"))
        defer { port.invalidate() }
        #expect(try port.blockingRequest(Message(id: 1, text: "any"), receiveTimeout: .seconds(60)).text == "answer to any")
        let plain = ReceivePort()
        defer { plain.invalidate() }
        #expect(throws: PortError.self) { try plain.listen(at: .tcp(host: "0.0.0.0", port: 0), security: .plainLoopbackOnly) }
    }

    /// Nothing listens: the connecting side learns it before any handshake.
    @Test func noListenerIsStillNoListener() throws {
        let fixture = try Fixture()
        let (socket, number) = try TCPSocket.listen(at: try #require(try TCPSocket.resolve("127.0.0.1", port: 0).first))
        try socket.close()  // a port just freed: nothing listens there
        #expect(throws: PortError.noListener("127.0.0.1:\(number)")) {
            try SendPort.connect(to: .tcp(host: "127.0.0.1", port: number), security: .secured(by: try fixture.certificates.tls("b")), timeout: .seconds(30))
        }
    }
}
