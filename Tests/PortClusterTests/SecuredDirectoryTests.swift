import Foundation
import Glibc
import NamedPortServer
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import PortMessaging
import Testing

/// The directory over TLS: a real etcd serving https only, which accepts a client only
/// with a certificate from its authority (`--client-cert-auth`).
@Suite("Cluster: the etcd directory over TLS", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct SecuredDirectoryTests {
    /// etcd's certificate and a node's, from one authority, and etcd started with them.
    private static func securedEtcd(_ directory: TestDirectory) throws -> (EtcdServer, TestCertificates) {
        let certificates = try TestCertificates.make(nodes: ["etcd", "a"], in: directory)
        let server = try #require(certificates.nodes["etcd"])
        let etcd = try EtcdServer(
            tls: .init(certificate: server.certificate, privateKey: server.privateKey, authority: certificates.authority),
            probe: try certificates.tls("a"))
        return (etcd, certificates)
    }

    /// A client with the authority's certificate reads, writes and watches; the watch has
    /// a secured connection of its own.
    @Test func aClientWithTheAuthoritysCertificateReadsWritesAndWatches() throws {
        let directory = TestDirectory()
        let (etcd, certificates) = try Self.securedEtcd(directory)
        #expect(etcd.endpoint.hasPrefix("https://"))
        let client = try EtcdClient(endpoint: etcd.endpoint, security: try certificates.tls("a"))
        let revision = try client.put("names/a", value: [1])
        #expect(try client.get("names/a").entry?.value == [1])
        let watch = try client.watch(prefix: "names/", fromRevision: revision + 1)
        defer { watch.cancel() }
        try client.put("names/b", value: [2])
        var changes: [DirectoryChange] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while changes.isEmpty, ContinuousClock.now < deadline { changes += try watch.next(timeout: .seconds(1)) }
        #expect(changes.map(\.key) == ["names/b"])
    }

    /// A client with a certificate from another authority, or with none, is refused with
    /// the directory unavailable and why; an https endpoint needs a security to start with.
    @Test func aClientOfAnotherAuthorityOrWithoutTLSIsRefused() throws {
        let directory = TestDirectory()
        let (etcd, certificates) = try Self.securedEtcd(directory)
        let stranger = try EtcdClient(endpoint: etcd.endpoint, security: try certificates.foreignTLS("a", trustingBoth: true), timeout: .seconds(5))
        do {
            _ = try stranger.get("names/a")
            Issue.record("a client of another authority was answered")
        } catch {
            guard case .unavailable(let endpoint, let reason) = error else {
                Issue.record("not unavailable: \(error)")
                return
            }
            #expect(endpoint == etcd.endpoint)
            #expect(!reason.isEmpty)
        }
        let plain = try EtcdClient(endpoint: "http://127.0.0.1:\(etcd.clientPort)", timeout: .seconds(5))
        #expect(throws: DirectoryError.self) { _ = try plain.get("names/a") }
        #expect(throws: DirectoryError.invalidEndpoint(etcd.endpoint)) { _ = try EtcdClient(endpoint: etcd.endpoint) }
    }

    /// Two `portnamed` nodes on an https-only etcd, each with its certificate: a name served
    /// on A is published and mirrored through the secured directory, and B's lookup reaches
    /// its owner. A node given an https directory without the TLS options does not start.
    @Test func portnamedNodesShareNamesThroughASecuredDirectory() throws {
        let directory = TestDirectory()
        let certificates = try TestCertificates.make(nodes: ["etcd", "a", "b"], in: directory)
        let server = try #require(certificates.nodes["etcd"])
        let etcd = try EtcdServer(
            tls: .init(certificate: server.certificate, privateKey: server.privateKey, authority: certificates.authority),
            probe: try certificates.tls("a"))
        func tlsArguments(_ name: String) throws -> [String] {
            let node = try #require(certificates.nodes[name])
            return ["--tls-cert", node.certificate, "--tls-key", node.privateKey, "--tls-ca", certificates.authority]
        }
        let a = try PortnamedNode("a", etcd: etcd, listen: "127.0.0.1:0", extra: try tlsArguments("a"))
        let b = try PortnamedNode("b", etcd: etcd, extra: try tlsArguments("b"))
        let owner = try a.serve("echo", echo: true)
        #expect(eventually(timeout: .seconds(60)) { b.daemon.standardError().contains("cluster: echo held by process \(owner.pid) on node a") })
        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }
        let port = try client.blockingLookup("echo")
        #expect(try port.blockingRequest(Message(id: 1, text: "through https"), receiveTimeout: .seconds(30)).text == "through https")
        // `portname list --cluster` reads the secured directory with a certificate too.
        let (listed, names) = try ChildProcess.run(
            executable: SpawnedProcess.product("portname"), ["list", "--cluster", etcd.endpoint] + (try tlsArguments("b")))
        #expect(listed == 0)
        #expect(names == "echo\ta\t\(owner.pid)\n")

        let scratch = TestDirectory()
        let (status, output) = try ChildProcess.run(
            executable: SpawnedProcess.product("portnamed"), ["--address", scratch.address, "--etcd", etcd.endpoint, "--node", "c"])
        #expect(status == 2)
        #expect(output.isEmpty)
    }
}
