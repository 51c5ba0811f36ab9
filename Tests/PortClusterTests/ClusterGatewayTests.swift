import Glibc
import NamedPortServer
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import PortMessaging
import Testing

/// A node's gateway in this process, over TCP on loopback: a connection opens a name and
/// then talks to its owner; what it does not hold, or a connection that does not open
/// first, is refused; the owner's end ends every connection relaying to it.
@Suite("Cluster: a node's gateway relays to a name's owner")
struct ClusterGatewayTests {
    /// An owner port answering each request with its bytes reversed and its id plus one,
    /// and the one-way messages it got.
    private final class Owner: Sendable {
        let thread = PermanentThread(name: "gateway-test-owner")
        let port = ReceivePort()
        let oneWay = Recorder<String>()

        init() throws {
            try thread.run()
            let loop = try #require(thread.loop)
            try thread.sync { [port, oneWay] in
                try port.schedule(on: loop) { message in
                    oneWay.append(message.text)
                    return Message(id: message.id + 1, bytes: message.bytes.reversed())
                }
            }
        }

        deinit {
            port.invalidate()
            thread.stop()
        }
    }

    private func gateway(holding names: [String: SendPort]) throws -> ClusterGateway {
        try ClusterGateway(listeningAt: .tcp(host: "127.0.0.1", port: 0), security: .plainLoopbackOnly) { names[$0] }
    }

    private func open(_ name: String, at gateway: ClusterGateway) throws -> (SendPort, GatewayWire.Status?, String) {
        let port = try SendPort.connect(to: gateway.address, security: .plainLoopbackOnly)
        let reply = try port.blockingRequest(GatewayWire.open(name), receiveTimeout: .seconds(30))
        let status = GatewayWire.status(of: reply)
        return (port, status?.0, status?.1 ?? "")
    }

    @Test func anOpenedConnectionCarriesRequestsAndMessagesToTheOwner() throws {
        let owner = try Owner()
        let gateway = try gateway(holding: ["db": owner.port.makeSendPort()])
        defer { gateway.close() }
        let (port, status, _) = try open("db", at: gateway)
        #expect(status == .opened)

        // Eight requests in flight from eight threads: each gets its own reply.
        let replies = Recorder<String>()
        let threads = (0..<8).map { index in
            LoopThread { _ in
                if let reply = try? port.blockingRequest(Message(id: UInt32(10 * index), text: "req\(index)"), receiveTimeout: .seconds(30)) {
                    replies.append("\(reply.id) \(reply.text)")
                }
            }
        }
        #expect(threads.allSatisfy { $0.join(timeout: .seconds(60)) })
        #expect(replies.all.sorted() == (0..<8).map { "\(10 * $0 + 1) \($0)qer" }.sorted())

        try port.send(Message(id: 7, text: "one-way"), timeout: .seconds(30))
        #expect(eventually(timeout: .seconds(30)) { owner.oneWay.all.contains("one-way") })
        #expect(owner.oneWay.all.count == 9)

        // Only bytes cross hosts: refused by the caller's own connection, nothing sent.
        #expect(throws: PortError.cannotCrossHosts("a port")) {
            try port.send(Message(id: 1, components: [.port(owner.port.makeSendPort())]))
        }
        #expect(try port.blockingRequest(Message(id: 3, text: "still"), receiveTimeout: .seconds(30)).text == "llits")
        #expect(gateway.relayingConnections == 1)
        port.invalidate()
        #expect(eventually(timeout: .seconds(30)) { gateway.relayingConnections == 0 })
    }

    @Test func aNameNotHeldHereAndAConnectionThatDoesNotOpenAreRefused() throws {
        let owner = try Owner()
        let gateway = try gateway(holding: ["db": owner.port.makeSendPort()])
        defer { gateway.close() }
        let (refused, status, detail) = try open("elsewhere", at: gateway)
        #expect(status == .notHere)
        #expect(detail == "no owner of elsewhere on this node")
        // The gateway hung up after answering.
        #expect(throws: PortError.peerDied) { try refused.blockingRequest(Message(id: 1, text: "x"), receiveTimeout: .seconds(30)) }

        let rude = try SendPort.connect(to: gateway.address, security: .plainLoopbackOnly)
        let answer = try rude.blockingRequest(Message(id: 5, text: "hello"), receiveTimeout: .seconds(30))
        #expect(GatewayWire.status(of: answer)?.0 == .protocolError)
        #expect(throws: PortError.peerDied) { try rude.blockingRequest(Message(id: 6, text: "again"), receiveTimeout: .seconds(30)) }
        #expect(owner.oneWay.all.isEmpty)
        #expect(gateway.relayingConnections == 0)
    }

    @Test func theOwnersEndEndsEveryConnectionRelayingToItWithPeerDied() throws {
        let owner = try Owner()
        let gateway = try gateway(holding: ["db": owner.port.makeSendPort()])
        defer { gateway.close() }
        let (first, _, _) = try open("db", at: gateway)
        let (second, _, _) = try open("db", at: gateway)
        #expect(try first.blockingRequest(Message(id: 1, text: "ab"), receiveTimeout: .seconds(30)).text == "ba")
        #expect(try second.blockingRequest(Message(id: 1, text: "cd"), receiveTimeout: .seconds(30)).text == "dc")

        owner.port.invalidate()
        // Asked before or after the gateway saw the owner go, a request fails the same way.
        for port in [first, second] {
            #expect(throws: PortError.peerDied) { try port.blockingRequest(Message(id: 2, text: "x"), receiveTimeout: .seconds(30)) }
        }
        #expect(eventually(timeout: .seconds(30)) { gateway.relayingConnections == 0 })
        // The name is no one's here any more: a new connection is refused.
        #expect(try open("db", at: gateway).1 == .notHere)
    }
}

/// Two `portnamed` nodes on a real etcd, the first with a gateway: a name served on it is
/// reached from this process through the directory, answers, and its owner's death is
/// seen both by the caller's port and by the directory.
@Suite("Cluster: a name on one node called from another", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct ClusterCallTests {
    @Test func aNameServedOnNodeAAnswersRequestsFromACallerOnNodeB() throws {
        let etcd = try EtcdServer()
        let a = try PortnamedNode("a", etcd: etcd, listen: "127.0.0.1:0")
        let owner = try a.serve("echo", echo: true)
        let changes = Recorder<String>()
        let caller = try ClusterNode(directory: etcd.endpoint, node: "b") { event in
            if case .ownerChanged("echo", let holder) = event { changes.append(holder.map { "+\($0.node) \($0.pid)" } ?? "-") }
        }
        defer { caller.close() }
        #expect(eventually(timeout: .seconds(60)) { caller.owner(of: "echo")?.address == a.gateway?.description })

        let port = try caller.connect(toName: "echo", security: .plainLoopbackOnly)
        #expect(port.remoteAddress == a.gateway?.description)
        for index in 0..<5 {
            let reply = try port.blockingRequest(Message(id: UInt32(index), text: "ping \(index)"), receiveTimeout: .seconds(30))
            #expect(reply.id == UInt32(index))
            #expect(reply.text == "ping \(index)")
        }

        #expect(throws: ClusterConnectError.noSuchName("nobody")) { try caller.connect(toName: "nobody", security: .plainLoopbackOnly) }

        // A host name on A is not for other hosts: A's gateway refuses to open it.
        let hostOnly = try a.serve("here-only", echo: true, hostOnly: true)
        let direct = try SendPort.connect(to: try #require(a.gateway), security: .plainLoopbackOnly)
        let answer = try direct.blockingRequest(GatewayWire.open("here-only"), receiveTimeout: .seconds(30))
        #expect(GatewayWire.status(of: answer)?.0 == .notHere)
        hostOnly.kill()

        owner.kill()
        #expect(throws: PortError.peerDied) { try port.blockingRequest(Message(id: 9, text: "late"), receiveTimeout: .seconds(30)) }
        #expect(eventually(timeout: .seconds(30)) { changes.all.last == "-" })
        #expect(changes.all == ["+a \(owner.pid)", "-"])
    }

    /// A program on node B that knows only its own name server looks up a name held on
    /// node A: the server hands it a port relaying to A's gateway; requests answer, and
    /// the owner's death fails the port with `peerDied`.
    @Test func aLookupAtNodeBsServerReachesANameHeldOnNodeA() throws {
        let etcd = try EtcdServer()
        let a = try PortnamedNode("a", etcd: etcd, listen: "127.0.0.1:0")
        let b = try PortnamedNode("b", etcd: etcd)
        let owner = try a.serve("echo", echo: true)
        #expect(eventually(timeout: .seconds(60)) { b.daemon.standardError().contains("cluster: echo held by process \(owner.pid) on node a") })

        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }
        let port = try client.blockingLookup("echo")
        let second = try client.blockingLookup("echo")
        for (index, each) in [port, second, port].enumerated() {
            #expect(try each.blockingRequest(Message(id: UInt32(index), text: "via b \(index)"), receiveTimeout: .seconds(30)).text == "via b \(index)")
        }
        #expect(throws: NameServerError.notFound(name: "nobody")) { try client.blockingLookup("nobody") }

        owner.kill()
        #expect(throws: PortError.peerDied) { try port.blockingRequest(Message(id: 9, text: "late"), receiveTimeout: .seconds(30)) }
        #expect(throws: PortError.peerDied) { try second.blockingRequest(Message(id: 9, text: "late"), receiveTimeout: .seconds(30)) }
        #expect(try eventually(timeout: .seconds(60)) {
            do { _ = try client.blockingLookup("echo") } catch NameServerError.notFound { return true }
            return false
        })
    }

    /// The same across nodes that speak TLS with certificates from the cluster's
    /// authority: B's lookup reaches A's owner, and so does a program that joins the
    /// cluster itself with its own certificate; a node whose certificate another
    /// authority issued is refused by A's gateway, and its lookup finds nothing it can use.
    @Test func nodesWithTheClustersCertificatesCallEachOtherAndAStrangerIsRefused() throws {
        let etcd = try EtcdServer()
        let scratch = TestDirectory()
        let certificates = try TestCertificates.make(nodes: ["a", "b", "caller"], in: scratch)
        func tlsArguments(_ node: TestCertificates.Node?, authority: String) -> [String] {
            guard let node else { return [] }
            return ["--tls-cert", node.certificate, "--tls-key", node.privateKey, "--tls-ca", authority]
        }
        let a = try PortnamedNode("a", etcd: etcd, listen: "127.0.0.1:0", extra: tlsArguments(certificates.nodes["a"], authority: certificates.authority))
        let b = try PortnamedNode("b", etcd: etcd, extra: tlsArguments(certificates.nodes["b"], authority: certificates.authority))
        let stranger = try PortnamedNode(
            "c", etcd: etcd, extra: tlsArguments(certificates.foreignNodes["a"], authority: certificates.foreignAuthority))
        let owner = try a.serve("echo", echo: true)
        for node in [b, stranger] {
            #expect(eventually(timeout: .seconds(60)) { node.daemon.standardError().contains("cluster: echo held by process \(owner.pid) on node a") })
        }

        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }
        let port = try client.blockingLookup("echo")
        #expect(try port.blockingRequest(Message(id: 1, text: "over tls"), receiveTimeout: .seconds(30)).text == "over tls")

        let caller = try ClusterNode(directory: etcd.endpoint, node: "caller")
        defer { caller.close() }
        #expect(eventually(timeout: .seconds(60)) { caller.owner(of: "echo") != nil })
        let direct = try caller.connect(toName: "echo", security: .secured(by: try certificates.tls("caller")))
        #expect(direct.remoteIdentity == "a")
        #expect(try direct.blockingRequest(Message(id: 2, text: "direct"), receiveTimeout: .seconds(30)).text == "direct")
        // Plain TCP to a TLS gateway is refused too.
        #expect(throws: ClusterConnectError.self) { try caller.connect(toName: "echo", security: .plainLoopbackOnly, timeout: .seconds(5)) }

        // The stranger's handshake is refused by A's gateway: its server answers the
        // lookup with nothing it can use.
        let strangerClient = try NameServerClient.blockingConnect(to: stranger.address)
        defer { strangerClient.close() }
        #expect(throws: NameServerError.notFound(name: "echo")) { try strangerClient.blockingLookup("echo") }
        let foreign = TCPSecurity.secured(by: try certificates.foreignTLS("a"))
        let refusal = Result { () throws(ClusterConnectError) in try caller.connect(toName: "echo", security: foreign, timeout: .seconds(10)) }
        guard case .failure(.connection(_, _, .handshakeFailed)) = refusal else {
            Issue.record("a certificate from another authority: \(refusal)")
            return
        }
        // A still serves the cluster's own.
        #expect(try port.blockingRequest(Message(id: 3, text: "still"), receiveTimeout: .seconds(30)).text == "still")
        owner.kill()
    }
}
