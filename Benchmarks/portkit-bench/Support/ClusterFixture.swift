import Dispatch
import Foundation
import Glibc
import NamedPortServer
import PermanentThread
import PortCluster
import PortMessaging
import PortKitLocks

/// Two cluster nodes in this process on a private etcd, as two hosts' `portnamed` would
/// be: node A has a name server (publishing what is registered there with cluster scope,
/// as `portnamed --etcd` does) and a gateway on loopback; the name `name` is held on A by an echoing
/// port served on a thread of its own and reached over a Unix socket, as an owner process
/// would be. Node B mirrors, and has a name server of its own whose lookups of names held
/// on A are answered with ports relaying to A's gateway (as `portnamed --etcd` answers
/// them). B reaches A's gateway over TLS (`ClusterTLS`, a throwaway authority), as nodes
/// on two hosts do.
final class ClusterFixture: Sendable {
    static let name = "bench.remote"
    let etcd: BenchEtcd
    let nodeA: ClusterNode
    let nodeB: ClusterNode
    let gateway: ClusterGateway
    let server: NameServer
    /// Node B's name server.
    let serverB: NameServer
    /// How node B connects to A's gateway.
    let security: TCPSecurity
    private let certificates: BenchCertificates
    private let directory: String
    private let ownerLoop: PortKitLoopThread
    private let owner: ReceivePort
    private let ownerPort: SendPort
    /// Node B's changes of `bench.gone`'s owner, as "+" and "-", and their signal.
    private let changes = Locked<[String]>([])
    private let changed = DispatchSemaphore(value: 0)

    init() throws {
        certificates = try BenchCertificates.make()
        let (serverTLS, clientTLS) = try TLSBenchmarks.securities(certificates)
        security = .secured(by: clientTLS)
        etcd = try BenchEtcd()
        directory = NSTemporaryDirectory() + "portkit-bench-cluster-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(directory, 0o700)
        ownerLoop = try PortKitLoopThread(name: "bench-cluster-owner")
        owner = ReceivePort()
        let ownerAddress = PortAddress.abstract("portkit-bench-owner-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try owner.listen(at: ownerAddress)
        try owner.schedule(on: ownerLoop.loop) { request in Message(id: request.id, bytes: request.bytes) }
        let ownerPort = try SendPort.connect(to: ownerAddress)
        self.ownerPort = ownerPort
        gateway = try ClusterGateway(listeningAt: .tcp(host: "127.0.0.1", port: 0), security: .secured(by: serverTLS)) { name in
            name == ClusterFixture.name ? ownerPort : nil
        }
        nodeA = try ClusterNode(directory: etcd.endpoint, node: "bench-a")
        nodeB = try ClusterNode(directory: etcd.endpoint, node: "bench-b")
        let (nodeA, gatewayAddress) = (self.nodeA, gateway.address.description)
        nodeA.advertise(gatewayAddress: gatewayAddress)
        server = try NameServer.start(at: directory + "/names.sock", directory: nodeA)
        nodeB.reachOtherNodes(security: security)
        serverB = try NameServer.start(at: directory + "/names-b.sock", directory: nodeB)
        let (changes, changed) = (self.changes, self.changed)
        nodeB.onEvent { event in
            guard case .ownerChanged("bench.gone", let holder) = event else { return }
            changes.withLock { $0.append(holder == nil ? "-" : "+") }
            changed.signal()
        }
        guard Self.until(.seconds(30), { nodeA.isConnected && self.nodeB.isConnected }) else {
            stop()
            throw BenchmarkError.timedOut("both nodes to reach etcd")
        }
        let owner = ClusterOwner(node: "bench-a", pid: getpid(), address: gatewayAddress)
        guard nodeA.publish(Self.name, owner: owner) == .published, Self.until(.seconds(30), { self.nodeB.owner(of: Self.name) == owner }) else {
            stop()
            throw BenchmarkError.timedOut("node B to see \(Self.name)")
        }
    }

    /// One owner's death on node A, as node B sees it (see `cluster.death`).
    func deathOnce() throws -> Duration {
        var connection = try RawNameConnection(address: server.address)
        try connection.register("bench.gone", cluster: true)
        try next("+")
        let holder = try NameBenchmarks.spawnHolder(connection.socket, connection.portEnd)
        connection.close()
        let start = ContinuousClock.now
        kill(holder, SIGKILL)
        try next("-")
        let elapsed = start.duration(to: .now)
        var status: CInt = 0
        waitpid(holder, &status, 0)
        return elapsed
    }

    /// Waits for node B's next change of `bench.gone` to be `expected`.
    private func next(_ expected: String) throws {
        guard changed.wait(timeout: .now() + .seconds(10)) == .success else { throw BenchmarkError.timedOut("bench.gone \(expected) on node B") }
        let got = changes.withLock { $0.removeFirst() }
        guard got == expected else { throw BenchmarkError.timedOut("bench.gone \(expected) on node B, not \(got)") }
    }

    func stop() {
        gateway.close()
        server.stop()
        serverB.stop()
        nodeA.close()
        nodeB.close()
        ownerPort.invalidate()
        owner.invalidate()
        ownerLoop.shutDown()
        etcd.stop()
        certificates.remove()
        rmdir(directory)
    }

    /// Polls `condition` every millisecond until it holds or `timeout` passes.
    private static func until(_ timeout: Duration, _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            usleep(1000)  // paces the polling of a condition with a deadline
        }
        return true
    }
}
