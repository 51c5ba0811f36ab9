import Foundation
import Glibc
import PortActors
import PortActorsTestActors
import PortCluster
import PortKitTestSupport
import Testing
import PortKitSystem

/// Two `portnamed --etcd` nodes on a real etcd: an actor registered with cluster scope on
/// node A is resolved and called from node B through A's gateway.
@Suite(
    "Actors across cluster nodes", .serialized,
    .enabled(if: ClusterEtcd.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct ClusterActorTests {
    @Test func aClusterScopedActorOnNodeAIsCalledFromNodeB() async throws {
        let etcd = try ClusterEtcd()
        let a = try ClusterDaemon("a", etcd: etcd, listen: true)
        let b = try ClusterDaemon("b", etcd: etcd, listen: false)
        let child = try startActorProcess(a.address, "clustered", ["--cluster"])
        defer { child.kill() }

        let system = try PortActorSystem(names: NameServerClient.blockingConnect(to: b.address))
        defer { system.shutDown() }
        // B's mirror of the directory trails it by a moment: the lookup waits for the name.
        let worker = try await system.resolve(name: "clustered", as: Worker.self, waitingUpTo: .seconds(60))
        #expect(worker.id.node == "a")
        #expect(worker.id.pid == child.pid)
        #expect(try await worker.move(Point(x: 5, y: 5, label: "far")) == Point(x: 6, y: 7, label: "far!"))
        await #expect(throws: Refusal(reason: "remote")) { _ = try await worker.refuse("remote") }

        // A descriptor cannot cross hosts: refused before anything is sent.
        let fd = open("/dev/null", O_RDONLY)
        defer { close(fd) }
        await #expect(throws: PortActorError.transport(.cannotCrossHosts("a file descriptor"))) {
            _ = try await worker.read(TransferableDescriptor(fd))
        }
        // One-way calls then a waited one: in order across the relay too.
        let recorder = try await system.resolve(name: "clustered.recorder", as: Recorder.self, waitingUpTo: .seconds(60))
        for value in 0..<200 { try await recorder.record(value) }
        #expect(try await recorder.values() == Array(0..<200))

        child.signal(SIGKILL)
        await #expect(throws: PortActorError.transport(.peerDied)) { _ = try await worker.pid() }
    }
}

/// A single etcd member on loopback ports of its own, killed with the test.
final class ClusterEtcd {
    static let executable: String? = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first { access($0, X_OK) == 0 }
    /// Whether the etcd tests run: it is installed, or the run requires it (`PORTKIT_REQUIRE_ETCD=1`).
    static var testsRun: Bool { executable != nil || ProcessInfo.processInfo.environment["PORTKIT_REQUIRE_ETCD"] == "1" }

    private let scratch = TestDirectory()
    private var process: SpawnedProcess?
    private(set) var endpoint = ""

    init() throws {
        guard let executable = Self.executable else { throw SpawnedProcess.Failure(description: "etcd is not installed") }
        // A port found free may be taken before etcd binds it: then another pair is tried.
        for attempt in 1...3 {
            let (client, peer) = (try Self.freePort(), try Self.freePort())
            endpoint = "http://127.0.0.1:\(client)"
            let peerURL = "http://127.0.0.1:\(peer)"
            let started = try SpawnedProcess.spawn(executable, [
                "--name", "test", "--data-dir", scratch.path + "/data\(attempt)",
                "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
                "--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
                "--initial-cluster", "test=\(peerURL)", "--log-level", "error",
            ])
            process = started
            let probe = try EtcdClient(endpoint: endpoint, timeout: .seconds(2))
            let up = eventually(timeout: .seconds(60)) {
                (try? probe.get("portkit-test-probe")) != nil || (try? started.wait(within: .milliseconds(1))) != nil
            }
            if up, (try? started.wait(within: .milliseconds(1))) == nil { return }
            started.kill()
        }
        throw SpawnedProcess.Failure(description: "etcd did not start")
    }

    deinit { process?.kill() }

    private static func freePort() throws -> UInt16 {
        let address = try TCPSocket.resolve("127.0.0.1", port: 0).first!
        let (socket, port) = try TCPSocket.listen(at: address)
        try socket.close()
        return port
    }
}

/// A `portnamed --etcd … --node NAME` in a private directory, with a plain loopback
/// gateway when `listen`.
final class ClusterDaemon {
    let directory = TestDirectory()
    let address: String
    let daemon: SpawnedProcess

    init(_ name: String, etcd: ClusterEtcd, listen: Bool) throws {
        address = directory.address
        var arguments = ["--address", address, "--etcd", etcd.endpoint, "--node", name, "--lease-ttl", "2"]
        if listen { arguments += ["--listen", "127.0.0.1:0"] }
        daemon = try SpawnedProcess.spawn(SpawnedProcess.product("portnamed"), arguments)
        if listen { #expect(try daemon.readLine(within: .seconds(60)).hasPrefix("gateway on ")) }
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(address)")
    }

    deinit { daemon.kill() }
}
