import Foundation
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

/// What a server built on a listening port needs: its peers (who, and when they go), a loop
/// that never waits on a slow peer, answers that say when they cannot go, and the
/// listening socket a service manager hands over.
@Suite("Ports for servers")
struct ServerPortTests {
    /// A listening port on a loop thread of its own, recording its peers' events in order
    /// with the messages between them.
    final class Server: Sendable {
        enum Seen: Sendable, Equatable {
            case connected(UInt64)
            case message(UInt64, String)
            case disconnected(UInt64, PortError)
        }

        let port = ReceivePort()
        let thread = LoopThread.runningDefaultMode(name: "server-port")
        let seen = Recorder<Seen>()
        let peers = Recorder<PortPeer>()
        let address: PortAddress

        init(answer: @escaping @Sendable (Message, PendingReply?) -> Void = { message, pending in
            pending?.reply(Message(id: message.id, text: "ok \(message.text)"))
        }) throws {
            address = .abstract("portkit-server-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            let seen = seen, peers = peers
            port.onPeerEvent { event in
                switch event {
                case .connected(let peer):
                    peers.append(peer)
                    seen.append(.connected(peer.id))
                case .disconnected(let peer, let reason):
                    seen.append(.disconnected(peer.id, reason))
                }
            }
            try port.listen(at: address)
            try port.schedule(on: thread.loop, inModes: [.default]) { message, pending in
                seen.append(.message(message.peer?.id ?? 0, message.text))
                answer(message, pending)
            }
        }

        func stop() {
            port.invalidate()
            thread.loop.stop()
            _ = thread.join()
        }
    }

    @Test func eachPeerIsReportedBeforeItsFirstMessageAndAfterItsLast() throws {
        let server = try Server()
        defer { server.stop() }
        let first = try SendPort.connect(to: server.address)
        let second = try SendPort.connect(to: server.address)
        #expect(try first.blockingRequest(Message(text: "a1"), receiveTimeout: .seconds(30)).text == "ok a1")
        #expect(try second.blockingRequest(Message(text: "b1"), receiveTimeout: .seconds(30)).text == "ok b1")
        #expect(try first.blockingRequest(Message(text: "a2"), receiveTimeout: .seconds(30)).text == "ok a2")
        first.invalidate()
        #expect(eventually { server.seen.all.contains { if case .disconnected = $0 { true } else { false } } })

        let peers = server.peers.all
        try #require(peers.count == 2)
        let (a, b) = (peers[0].id, peers[1].id)
        #expect(a != b)
        #expect(peers.allSatisfy { $0.credentials?.pid == getpid() && $0.credentials?.uid == getuid() })
        #expect(server.seen.all == [
            .connected(a), .connected(b), .message(a, "a1"), .message(b, "b1"), .message(a, "a2"), .disconnected(a, .peerDied),
        ])
        #expect(!peers[0].isConnected && peers[1].isConnected)
        second.invalidate()
    }

    /// The server ends a peer: the peer's next request fails with `peerDied`, and the
    /// observer hears of it as ended on this side.
    @Test func theServerDisconnectsAPeer() throws {
        let server = try Server { message, pending in
            if message.text == "bye" {
                message.peer?.disconnect()
            } else {
                pending?.reply(Message(text: "ok"))
            }
        }
        defer { server.stop() }
        let client = try SendPort.connect(to: server.address)
        #expect(try client.blockingRequest(Message(text: "hi"), receiveTimeout: .seconds(30)).text == "ok")
        #expect(throws: PortError.peerDied) { try client.blockingRequest(Message(text: "bye"), receiveTimeout: .seconds(30)) }
        #expect(eventually { server.seen.count == 4 })
        let id = try #require(server.peers.all.first).id
        #expect(server.seen.all.last == .disconnected(id, .invalidPort))
    }

    /// A server that answers and then ends the peer at once: the answer is not lost with
    /// the connection. The peer's next request finds it gone (`peerDied`), and the answer
    /// left unread in the socket still reaches the request it was for.
    @Test func anAnswerWrittenJustBeforeTheServerEndsThePeerIsNotLost() throws {
        let server = try Server { message, pending in
            pending?.reply(Message(text: "last words"))
            message.peer?.disconnect()
        }
        defer { server.stop() }
        let client = try SendPort.connect(to: server.address)
        let first = try client.send(request: Message(text: "hi"))
        #expect(eventually { server.seen.all.contains { if case .disconnected = $0 { true } else { false } } })
        #expect(throws: PortError.peerDied) { try client.blockingRequest(Message(text: "more"), receiveTimeout: .seconds(30)) }
        #expect(try first.reply(timeout: .seconds(30)).text == "last words")
    }

    /// A peer that sends and closes before the server's loop has even accepted it: its
    /// message is still delivered (the port's limits announcement then meets a closed
    /// peer; what the peer wrote is read before the connection is closed), and its end is
    /// reported after it.
    @Test func aMessageFromAPeerGoneBeforeItWasAcceptedIsDelivered() throws {
        let server = try Server()
        defer { server.stop() }
        // Hold the server's loop while the peer comes and goes.
        let held = ConditionLock(false)
        let release = ConditionLock(false)
        try server.thread.loop.perform {
            held.withLock { $0 = true }
            held.broadcast()
            _ = release.wait(until: .now + .seconds(60)) { $0 ? true : nil }
        }
        #expect(held.wait(until: .now + .seconds(60)) { $0 ? true : nil } == true)
        let client = try SendPort.connect(to: server.address)
        try client.send(Message(text: "parting words"))
        client.invalidate()
        release.withLock { $0 = true }
        release.broadcast()
        #expect(eventually { server.seen.all.contains { if case .disconnected = $0 { true } else { false } } })
        let seen = server.seen.all
        guard case .connected(let id)? = seen.first else {
            Issue.record("\(seen)")
            return
        }
        #expect(seen == [.connected(id), .message(id, "parting words"), .disconnected(id, .peerDied)])
    }

    /// Replies written on the loop's thread never make it wait for a peer that does not
    /// read: what the socket does not take is queued and written as the peer reads, in
    /// order and whole; past the queue's bound an answer with a zero timeout is refused at
    /// once, and nothing of it is sent.
    @Test func aLoopNeverWaitsForAPeerThatDoesNotRead() throws {
        let size = 1024 * 1024
        let outcomes = Recorder<String>()
        let server = try Server { message, pending in
            guard let pending else { return }
            let index = UInt8(message.bytes.first ?? 0)
            do {
                try pending.answer(Message(id: UInt32(index), bytes: [UInt8](repeating: index, count: size)), timeout: .zero)
                outcomes.append("sent \(index)")
            } catch {
                outcomes.append("refused \(index): \(error)")
                pending.refuse()
            }
        }
        defer { server.stop() }
        // A client that sends eight requests and reads nothing for now.
        let socket = try UnixSocket.make(nonBlocking: false)
        defer { try? socket.close() }
        guard case .abstract(let name) = server.address else { return }
        try UnixSocket.connect(socket, to: name, abstract: true)
        for index in 0..<8 {
            let frame = try WireCodec.encode(WireMessage(kind: .request, id: 0, sequence: UInt64(index + 1), components: [.bytes([UInt8(index)])]))
            _ = try frame.withUnsafeBytes { try socket.send($0) }
        }
        #expect(eventually(timeout: .seconds(60)) { outcomes.count == 8 })
        // The loop is free meanwhile: a block performed on it runs.
        let ran = ConditionLock(false)
        try server.thread.loop.perform {
            ran.withLock { $0 = true }
            ran.broadcast()
        }
        #expect(ran.wait(until: .now + .seconds(30)) { $0 ? true : nil } == true)
        let all = outcomes.all
        let sent = all.filter { $0.hasPrefix("sent") }
        #expect(sent.count >= 4 && sent.count < 8, "\(all)")
        #expect(all.filter { $0.hasPrefix("refused") }.allSatisfy { $0.contains("timed out") }, "\(all)")

        // Now read: every answer that went is whole and in order, then a refusal per the rest.
        let replies = try readFrames(from: socket) { $0.filter { $0.kind != .limits }.count >= 8 }.filter { $0.kind != .limits }
        let answered = replies.filter { $0.kind == .reply }
        #expect(answered.map(\.sequence) == (1...UInt64(sent.count)).map { $0 })
        for reply in answered {
            #expect(reply.components == [.bytes([UInt8](repeating: UInt8(reply.sequence - 1), count: size))])
        }
        #expect(replies.filter { $0.kind == .noReply }.count == 8 - sent.count)
    }

    /// An answer that cannot go says why and leaves the request to be answered otherwise.
    @Test func anAnswerThatCannotGoThrowsAndLeavesTheRequestOpen() throws {
        let server = try Server { message, pending in
            guard let pending else { return }
            let gone = ReceivePort()
            let port = gone.makeSendPort()
            gone.invalidate()
            do {
                try pending.answer(Message(components: [.port(port)]))
            } catch {
                pending.reply(Message(text: "could not: \(error)"))
            }
        }
        defer { server.stop() }
        let client = try SendPort.connect(to: server.address)
        defer { client.invalidate() }
        let reply = try client.blockingRequest(Message(text: "?"), receiveTimeout: .seconds(30))
        #expect(reply.text == "could not: \(PortError.invalidPort)")
    }

    /// Who listens: a connected send port names the listening process; an in-process one
    /// this process.
    @Test func aSendPortNamesWhoListens() throws {
        let server = try Server()
        defer { server.stop() }
        let client = try SendPort.connect(to: server.address)
        defer { client.invalidate() }
        #expect(client.remoteCredentials == .thisProcess)
        #expect(ReceivePort().makeSendPort().remoteCredentials == .thisProcess)
    }

    /// A listening socket made elsewhere (as systemd passes one) is served, and its file is
    /// left to its maker when the port goes.
    @Test func aPortListensOnASocketItWasHanded() throws {
        let directory = NSTemporaryDirectory() + "pks-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(directory, 0o700)
        let path = directory + "/handed.sock"
        let socket = try UnixSocket.make(nonBlocking: false)
        try UnixSocket.bind(socket, to: path)
        try UnixSocket.listen(socket, backlog: 8)
        let served = ServedPort { Message(text: "served \($0.text)") }
        try served.port.listen(onSocket: socket.rawValue)
        #expect(served.port.listeningAddress == .path(path))
        #expect(throws: PortError.alreadyListening) { try served.port.listen(onSocket: socket.rawValue) }
        let client = try SendPort.connect(to: .path(path))
        #expect(try client.blockingRequest(Message(text: "x"), receiveTimeout: .seconds(30)).text == "served x")
        client.invalidate()
        served.stop()
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(throws: PortError.system(operation: "listen on descriptor 0: not a listening Unix stream socket", errno: EINVAL)) {
            try ReceivePort().listen(onSocket: 0)
        }
    }

    /// Descriptors that no frame claims end the connection (a peer could otherwise make the
    /// port hold them for ever); they are closed.
    @Test func descriptorsNoFrameClaimsEndTheConnection() throws {
        let server = try Server()
        defer { server.stop() }
        let socket = try UnixSocket.make(nonBlocking: false)
        defer { try? socket.close() }
        guard case .abstract(let name) = server.address else { return }
        try UnixSocket.connect(socket, to: name, abstract: true)
        var ends: [CInt] = [-1, -1]
        try #require(pipe(&ends) == 0)
        let frame = try WireCodec.encode(WireMessage(kind: .message, id: 0, components: [.bytes(Array("x".utf8))]))
        _ = try frame.withUnsafeBytes { try socket.send($0, descriptors: [ends[1]]) }
        close(ends[1])
        #expect(eventually { server.seen.all.contains { if case .disconnected(_, .malformed) = $0 { true } else { false } } })
        var byte: UInt8 = 0
        #expect(try FileDescriptor(rawValue: ends[0]).poll(CShort(POLLIN), timeout: .seconds(20)) != 0)
        #expect(read(ends[0], &byte, 1) == 0, "the descriptor sent was closed")
        close(ends[0])
    }
}
