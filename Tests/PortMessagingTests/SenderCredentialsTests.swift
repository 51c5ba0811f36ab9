import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// Every received message names its sender, whatever the transport: what the kernel says
/// over a socket (even one made by a third process), the child or parent over pipes, this
/// process in-process.
@Suite("Sender credentials")
struct SenderCredentialsTests {
    private let me = SenderCredentials(pid: getpid(), uid: getuid(), gid: getgid())

    @Test func anInProcessMessageAndReplyNameThisProcess() throws {
        let served = ServedPort { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let port = served.port.makeSendPort()
        try port.send(Message(id: 1, text: "one-way"), timeout: .seconds(10))
        let reply = try port.blockingRequest(Message(id: 2, text: "request"), receiveTimeout: .seconds(30))
        #expect(eventually { served.received.count == 2 })
        #expect(served.received.all.map(\.sender) == [me, me])
        #expect(reply.text == "request")
        #expect(reply.sender == me)
        #expect(Message(id: 3).sender == nil, "a message made here names no one yet")
    }

    @Test func overASocketThisProcessIsNamed() throws {
        let served = ServedPort { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let port = SendPort(adoptingSocket: try served.port.makeSendPort().transferableEnd().end)
        defer { port.invalidate() }
        let reply = try port.blockingRequest(Message(id: 2, text: "request"), receiveTimeout: .seconds(30))
        #expect(reply.sender == me)
        #expect(served.received.all.first?.sender == me)
    }

    /// A port's peer asks SO_PEERCRED only when someone wants it; one handed out in a
    /// message and not asked while connected still says who it was after its end, and a
    /// socket end that passes credentials only from its first write names its sender.
    @Test func aPeerHandedOutKeepsItsCredentialsAfterItsEnd() throws {
        let served = ServedPort { Message(id: $0.id, bytes: $0.bytes) }
        defer { served.stop() }
        let (adopted, sending) = try Connection.makeSocketPair()
        try served.port.adoptConnection(adopted)
        let port = SendPort(adoptingSocket: sending)
        let reply = try port.blockingRequest(Message(id: 1, text: "request"), receiveTimeout: .seconds(30))
        #expect(reply.sender == me)
        let message = try #require(served.received.all.first)
        #expect(message.sender == me)
        let peer = try #require(message.peer)
        port.invalidate()
        #expect(eventually { !peer.isConnected })
        #expect(peer.credentials == me, "read as the connection closed")
    }

    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func aChildsMessagesAndRepliesNameTheChild(channel: ChildWorker.Channel) throws {
        let child = try WorkerChild(channel: channel)
        defer { child.finish() }
        let expected = SenderCredentials(pid: child.child.pid, uid: getuid(), gid: getgid())
        let reply = try child.worker.blockingRequest(Message(id: WorkerOp.echo, text: "ping"), receiveTimeout: .seconds(30))
        #expect(reply.sender == expected)
        try child.worker.send(Message(id: WorkerOp.sendBack), timeout: .seconds(10))
        #expect(eventually { child.boss.received.all.contains { $0.text == "one-way from the child" } })
        let oneWay = child.boss.received.all.filter { $0.text == "one-way from the child" }
        #expect(oneWay.map(\.sender) == [expected])
        // The check-in came from the child too.
        #expect(child.boss.received.all.allSatisfy { $0.sender == expected })
    }

    /// This process makes the socket pair and passes one end to the child, which sends on
    /// it: the message names the child, not the pair's maker (what SO_PEERCRED would say).
    @Test func aPortPassedOnNamesWhoeverSendsOnIt() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let third = ServedPort()
        defer { third.stop() }
        _ = try child.worker.blockingRequest(
            Message(id: WorkerOp.talkToPassedPort, components: [.port(third.port.makeSendPort())]), receiveTimeout: .seconds(30))
        #expect(eventually { third.received.count == 1 })
        #expect(third.received.all.first?.sender?.pid == child.child.pid)
    }
}
