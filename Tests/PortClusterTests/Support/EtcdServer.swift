import Foundation
import Glibc
import PermanentThread
import PortCluster
import PortKitTestSupport
import PortKitSystem

/// A real etcd server for one test: a single member on loopback ports of its own, with a
/// temporary data directory, killed (SIGKILL) and started again on demand.
final class EtcdServer {
    /// Where `etcd` is, if installed.
    static let executable: String? = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first { access($0, X_OK) == 0 }

    /// Whether the tests that need etcd run: it is installed, or the run requires it
    /// (`PORTKIT_REQUIRE_ETCD=1`, as CI sets, where a missing etcd is a failure, not a skip).
    static var testsRun: Bool { executable != nil || ProcessInfo.processInfo.environment["PORTKIT_REQUIRE_ETCD"] == "1" }

    /// The files of a TLS server: its certificate and key, and the authority whose
    /// certificates it accepts from clients (`--client-cert-auth`).
    struct TLSFiles {
        let certificate: String
        let privateKey: String
        let authority: String
    }

    /// Its TLS files, when it serves https, and the security its own probe connects with.
    private let tls: TLSFiles?
    private let probeSecurity: ClusterTLS?
    private(set) var clientPort: UInt16 = 0
    private(set) var peerPort: UInt16 = 0
    private let scratch = TestDirectory()
    /// The server's data directory's parent.
    var directory: String { scratch.path }
    private var process: SpawnedProcess?

    /// The client endpoint, `http://127.0.0.1:PORT` (`https://` with TLS).
    var endpoint: String { "\(tls == nil ? "http" : "https")://127.0.0.1:\(clientPort)" }

    /// Starts etcd and waits until it answers; with `tls`, over https only, and answering
    /// only clients with a certificate from its authority (its probe uses `probe`).
    init(tls: TLSFiles? = nil, probe: ClusterTLS? = nil) throws {
        self.tls = tls
        probeSecurity = probe
        guard Self.executable != nil else { throw SpawnedProcess.Failure(description: "etcd is not installed (apt-get install etcd-server)") }
        // A port found free may be taken by another test before etcd binds it: then etcd
        // exits at once, and another pair of ports is tried.
        for attempt in 1...3 {
            clientPort = try Self.freePort()
            peerPort = try Self.freePort()
            do {
                try start()
                return
            } catch let failure as SpawnedProcess.Failure where failure.description.contains("exited") && attempt < 3 {
                try? FileManager.default.removeItem(atPath: directory + "/data")
            }
        }
    }

    deinit {
        process?.kill()
    }

    /// Starts the server (again, on the same ports and data) and waits until it answers.
    func start() throws {
        let peer = "http://127.0.0.1:\(peerPort)"
        var arguments = [
            "--name", "test", "--data-dir", directory + "/data",
            "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "test=\(peer)", "--log-level", "error",
        ]
        if let tls {
            arguments += [
                "--cert-file", tls.certificate, "--key-file", tls.privateKey, "--trusted-ca-file", tls.authority, "--client-cert-auth",
            ]
        }
        process = try SpawnedProcess.spawn(Self.executable!, arguments)
        let client = try EtcdClient(endpoint: endpoint, security: probeSecurity, timeout: .seconds(2))
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            do {
                _ = try client.get("portkit-test-probe")
                return
            } catch {
                if let process, let ended = try? process.wait(within: .milliseconds(1)) {
                    throw SpawnedProcess.Failure(description: "etcd exited (\(ended)): \(process.standardError())")
                }
                guard ContinuousClock.now < deadline else {
                    throw SpawnedProcess.Failure(description: "etcd did not answer within 60 s: \(error); \(process?.standardError() ?? "")")
                }
                usleep(50_000)  // paces the probes of the condition above; it synchronises nothing
            }
        }
    }

    /// Kills the server with SIGKILL and waits for it to be gone.
    func kill() {
        process?.kill()
        process = nil
    }

    /// Sends `signal` to the server: `SIGSTOP` stops it answering (the kernel still takes
    /// its connections), `SIGCONT` resumes it.
    func signal(_ signal: Int32) {
        process?.signal(signal)
    }

    /// Stops the server (SIGSTOP) and returns once every thread of it is stopped, so that
    /// nothing sent after this is answered until `signal(SIGCONT)`.
    func stop() throws {
        try process?.stop()
    }

    /// A loopback TCP port no one listens on now.
    private static func freePort() throws -> UInt16 {
        let address = try TCPSocket.resolve("127.0.0.1", port: 0).first!
        let (socket, port) = try TCPSocket.listen(at: address)
        try socket.close()
        return port
    }
}
