import Foundation
import Glibc
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem

/// A secured listener and a node's gateway under attack from a real process on loopback:
/// silent connections that hold handshakes and are opened again as soon as they close,
/// slow or oversized first messages, idle callers, more connections than the cap. Every
/// bound asserted is generous: the point is that the service goes on, not how fast.
@Suite("Cluster: limits that keep strangers from taking the gateway away", .serialized)
struct GatewayLimitsTests {
    /// An attacker process holding `count` connections to 127.0.0.1:`port` (each silent,
    /// or a slow sender of a `bytes`-byte frame), reopening each the listener closes.
    private func flood(_ port: UInt16, count: Int, bytes: Int = 0) throws -> SpawnedProcess {
        let attacker = try SpawnedProcess.helper("tcp-flood", [String(port), String(count), String(bytes)])
        #expect(try attacker.readLine(within: .seconds(120)) == "holding \(count)")
        return attacker
    }

    /// How many connections the attacker reopened so far (its last report).
    private func reopened(_ attacker: SpawnedProcess) throws -> Int {
        Int(try attacker.readLine(within: .seconds(60)).dropFirst("reopened ".count)) ?? -1
    }

    /// The port a listening address names.
    private func portNumber(_ address: PortAddress) throws -> UInt16 {
        guard case .tcp(_, let port) = address else { throw PortError.noListener("\(address) is not TCP") }
        return port
    }

    /// A raw TCP connection to `port` on loopback.
    private func rawConnection(_ port: UInt16) throws -> FileDescriptor {
        let address = try #require(try TCPSocket.resolve("127.0.0.1", port: port).first)
        return try TCPSocket.connect(to: address, deadline: .now + .seconds(60))
    }

    /// Whether the listener closed `socket` within `timeout` (what it sent first, such as
    /// its limits frame, read and dropped).
    private func closedByPeer(_ socket: FileDescriptor, within timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        var scratch = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            guard (try? socket.poll(CShort(POLLIN), timeout: deadline - .now)) ?? 0 != 0 else { return false }
            let read = recv(socket.rawValue, &scratch, scratch.count, CInt(MSG_DONTWAIT))
            if read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR) { return true }
        }
        return false
    }

    @Test(arguments: [300, 1000])
    func certifiedCallersConnectWhileSilentAttackersHoldEveryHandshake(attackers: Int) throws {
        let fixture = try SecuredPortTests.Fixture()
        let server = try SecuredServer(security: .secured(by: try fixture.certificates.tls("a")))
        defer { server.stop() }
        let attacker = try flood(server.number, count: attackers)
        defer { attacker.kill() }
        // More silent connections than handshakes may run: the attacker is kept busy
        // opening them again as they make room.
        #expect(attackers > ReceivePort.maxPendingHandshakes)

        let member = TCPSecurity.secured(by: try fixture.certificates.tls("b"))
        var times: [Duration] = []
        for index in 0..<20 {
            let started = ContinuousClock.now
            do {
                let port = try SendPort.connect(to: server.address, security: member, timeout: .seconds(20))
                defer { port.invalidate() }
                let reply = try port.blockingRequest(Message(id: UInt32(index), text: "call \(index)"), receiveTimeout: .seconds(60))
                #expect(reply.text == "answer to call \(index)")
                times.append(.now - started)
            } catch {
                Issue.record("certified caller \(index) of 20 with \(attackers) silent attackers: \(error)")
            }
        }
        #expect(times.count == 20)
        #expect(times.allSatisfy { $0 < .seconds(20) }, "connect times: \(times)")
        // The attacker was there all along: still running, its connections being closed.
        #expect(try reopened(attacker) >= 0)
        print("certified callers with \(attackers) silent attackers: \(times.count)/20 connected, slowest \(times.max() ?? .zero)")
    }

    // MARK: The gateway's own limits

    /// An owner port on a thread of its own, answering each request with its bytes; a
    /// request whose text is "slow" is answered after 3 s.
    private final class Owner: Sendable {
        let thread = LoopThread.runningDefaultMode(name: "gateway-limits-owner", limit: .seconds(600))
        let port = ReceivePort()

        init() throws {
            let loop = thread.loop
            try port.schedule(on: loop, deferringReplies: { message, reply in
                guard let reply else { return }
                let answer = Message(id: message.id, bytes: message.bytes)
                if message.text == "slow" {
                    try? loop.add(LoopTimer(after: .seconds(3)) { _ in _ = reply.reply(answer) }, forMode: .default)
                } else {
                    _ = reply.reply(answer)
                }
            })
        }

        deinit {
            port.invalidate()
            thread.loop.stop()
            _ = thread.join()
        }
    }

    private func gateway(_ owner: Owner, limits: GatewayLimits) throws -> ClusterGateway {
        let ownerPort = owner.port.makeSendPort()
        return try ClusterGateway(listeningAt: .tcp(host: "127.0.0.1", port: 0), security: .plainLoopbackOnly, limits: limits) {
            $0 == "db" ? ownerPort : nil
        }
    }

    /// A caller's connection that opened "db".
    private func opened(_ gateway: ClusterGateway) throws -> SendPort {
        let port = try SendPort.connect(to: gateway.address, security: .plainLoopbackOnly, timeout: .seconds(60))
        let reply = try port.blockingRequest(GatewayWire.open("db"), receiveTimeout: .seconds(60))
        #expect(GatewayWire.status(of: reply)?.0 == .opened)
        return port
    }

    @Test func aFirstMessageLargerThanAnOpenRequestIsRefusedAtItsHeader() throws {
        let owner = try Owner()
        // No time-out closes them here: only the first message's limit can.
        let gateway = try gateway(owner, limits: GatewayLimits(openTimeout: .seconds(600), requestTimeout: .seconds(600)))
        defer { gateway.close() }
        // Twenty connections each announcing a 16 MB first frame and sending a little of
        // it: each is closed at its header, its body never waited for.
        let attacker = try flood(try portNumber(gateway.address), count: 20, bytes: 16_000_000)
        defer { attacker.kill() }
        #expect(try eventually(timeout: .seconds(60)) { try reopened(attacker) >= 20 })
        // A caller is served meanwhile, and its own large messages still cross.
        let caller = try opened(gateway)
        let large = [UInt8](repeating: 7, count: 1024 * 1024)
        #expect(try caller.blockingRequest(Message(id: 1, bytes: large), receiveTimeout: .seconds(60)).bytes == large)
    }

    @Test func connectionsThatDoNotOpenInTimeAreClosedAndOpenedOnesServed() throws {
        let owner = try Owner()
        let gateway = try gateway(owner, limits: GatewayLimits(openTimeout: .seconds(1), requestTimeout: .seconds(1)))
        defer { gateway.close() }
        let port = try portNumber(gateway.address)
        let caller = try opened(gateway)
        // Silent ones, and slow senders of a first message that never ends.
        let silent = try (0..<50).map { _ in try rawConnection(port) }
        let slow = try (0..<50).map { _ in try rawConnection(port) }
        defer { for socket in silent + slow { try? socket.close() } }
        let frame = try WireCodec.encode(WireMessage(id: GatewayWire.openID, components: [.bytes(Array("db".utf8))]))
        let begun = Array(frame.prefix(WireLayout.headerSize + 1))
        for socket in slow { _ = begun.withUnsafeBytes { send(socket.rawValue, $0.baseAddress, $0.count, 0) } }
        for socket in silent + slow { #expect(closedByPeer(socket, within: .seconds(60))) }
        #expect(eventually(timeout: .seconds(60)) { gateway.connections == 1 })
        // The caller that opened in time is not idle-closed (no idle time-out by default).
        #expect(try caller.blockingRequest(Message(id: 2, text: "still here"), receiveTimeout: .seconds(60)).text == "still here")
    }

    @Test func anIdleCallerIsClosedButNotOneWaitingForItsAnswer() throws {
        let owner = try Owner()
        let gateway = try gateway(owner, limits: GatewayLimits(idleTimeout: .seconds(1)))
        defer { gateway.close() }
        let idle = try opened(gateway)
        let waiting = try opened(gateway)
        // Answered after 3 s, three idle time-outs: the connection waits for it, not idle.
        #expect(try waiting.blockingRequest(Message(id: 1, text: "slow"), receiveTimeout: .seconds(60)).text == "slow")
        #expect(eventually(timeout: .seconds(60)) { gateway.connections <= 1 })
        #expect(throws: PortError.peerDied) { try idle.blockingRequest(Message(id: 2, text: "late"), receiveTimeout: .seconds(60)) }
    }

    @Test func connectionsOverTheCapAreClosedAsTheyCome() throws {
        let owner = try Owner()
        let gateway = try gateway(owner, limits: GatewayLimits(maxConnections: 10, openTimeout: .seconds(600)))
        defer { gateway.close() }
        let port = try portNumber(gateway.address)
        let held = try (0..<10).map { _ in try rawConnection(port) }
        defer { for socket in held { try? socket.close() } }
        #expect(eventually(timeout: .seconds(60)) { gateway.connections == 10 })
        // The eleventh is closed at once, long before the open time-out.
        let extra = try rawConnection(port)
        defer { try? extra.close() }
        #expect(closedByPeer(extra, within: .seconds(60)))
        #expect(gateway.refusedConnections >= 1)
        #expect(gateway.connections == 10)
        // Once one goes, a caller gets in.
        try held[0].close()
        #expect(eventually(timeout: .seconds(60)) { (try? opened(gateway)) != nil })
    }
}

/// A node's gateway and name server in one `portnamed` under a descriptor limit of 1,024,
/// flooded with more idle gateway connections than that: the name server goes on serving.
@Suite("Cluster: the gateway never starves its name server", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct GatewayDescriptorTests {
    @Test func idleGatewayConnectionsLeaveTheNameServerItsDescriptors() throws {
        let etcd = try EtcdServer()
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(
            SpawnedProcess.product("portnamed"),
            ["--address", directory.address, "--etcd", etcd.endpoint, "--node", "a", "--listen", "127.0.0.1:0", "--log-level", "warning"],
            viaShell: "ulimit -n 1024 && exec")
        defer { daemon.kill() }
        let line = try daemon.readLine(within: .seconds(60))
        let gateway = try #require(PortAddress(tcp: String(line.dropFirst("gateway on ".count))))
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(directory.address)")
        guard case .tcp(_, let port) = gateway else { return }

        let attacker = try SpawnedProcess.helper("tcp-flood", [String(port), "1100"])
        defer { attacker.kill() }
        #expect(try attacker.readLine(within: .seconds(120)) == "holding 1100")

        let portname = SpawnedProcess.product("portname")
        let owner = try SpawnedProcess.spawn(portname, ["--address", directory.address, "serve", "db", "--echo"])
        defer { owner.kill() }
        #expect(try owner.readLine(within: .seconds(60)) == "serving db")
        for index in 0..<20 {
            let (status, output) = try ChildProcess.run(executable: portname, ["--address", directory.address, "send", "db", "hi \(index)"])
            #expect(status == 0 && output == "hi \(index)\n", "send \(index): exit \(status) \(output)")
        }
        let (status, _) = try ChildProcess.run(executable: portname, ["--address", directory.address, "status"])
        #expect(status == 0)
    }
}
