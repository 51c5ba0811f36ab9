import Foundation
import PortCluster
import PortKitTestSupport
import Testing

/// Certificates for TLS tests, made with the `openssl` command in a test's directory: a
/// cluster authority, a second authority unrelated to it, and for each node name a
/// certificate (common name: the node's name; usable by a server and a client, for
/// `localhost` and `127.0.0.1`) from each authority.
///
/// ```swift
/// let directory = TestDirectory()
/// let certificates = try TestCertificates.make(nodes: ["a", "b"], in: directory)
/// let security = try certificates.tls("a")          // node a of the cluster
/// let stranger = try certificates.foreignTLS("a")   // node a of another cluster
/// ```
struct TestCertificates: Sendable {
    /// One node's files.
    struct Node: Sendable {
        /// The common name of the certificate's subject.
        let name: String
        /// The PEM certificate.
        let certificate: String
        /// The PEM private key (unencrypted).
        let privateKey: String
    }

    /// The cluster authority's PEM certificate.
    let authority: String
    /// The unrelated authority's PEM certificate.
    let foreignAuthority: String
    /// Both authorities' certificates in one file (a node trusting either).
    let bothAuthorities: String
    /// The nodes whose certificates the cluster authority issued, by name.
    let nodes: [String: Node]
    /// The same names, their certificates issued by the unrelated authority.
    let foreignNodes: [String: Node]

    /// Makes both authorities and, for each of `names`, a certificate from each, in
    /// `directory`.
    static func make(nodes names: [String], in directory: TestDirectory) throws -> TestCertificates {
        let root = directory.path + "/certificates"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let extensions = root + "/node.ext"
        try """
            basicConstraints = CA:FALSE
            keyUsage = digitalSignature
            extendedKeyUsage = serverAuth, clientAuth
            subjectAltName = DNS:localhost, IP:127.0.0.1

            """.write(toFile: extensions, atomically: true, encoding: .utf8)
        let cluster = try makeAuthority("cluster-ca", in: root)
        let foreign = try makeAuthority("foreign-ca", in: root)
        let both = root + "/both-ca.pem"
        try (String(contentsOfFile: cluster.certificate, encoding: .utf8) + String(contentsOfFile: foreign.certificate, encoding: .utf8))
            .write(toFile: both, atomically: true, encoding: .utf8)
        var nodes: [String: Node] = [:]
        var foreignNodes: [String: Node] = [:]
        for name in names {
            nodes[name] = try makeNode(name, file: name, by: cluster, extensions: extensions, in: root)
            foreignNodes[name] = try makeNode(name, file: "foreign-" + name, by: foreign, extensions: extensions, in: root)
        }
        return TestCertificates(
            authority: cluster.certificate, foreignAuthority: foreign.certificate, bothAuthorities: both,
            nodes: nodes, foreignNodes: foreignNodes)
    }

    /// Node `name` of the cluster: its certificate from the cluster authority, trusting it.
    func tls(_ name: String) throws -> ClusterTLS {
        let node = try #require(nodes[name])
        return try ClusterTLS(certificate: node.certificate, privateKey: node.privateKey, authority: authority)
    }

    /// Node `name` of another cluster: its certificate from the unrelated authority,
    /// trusting that one (`trustingBoth`: trusting the cluster authority too, so that it
    /// accepts the cluster's servers and only they refuse it).
    func foreignTLS(_ name: String, trustingBoth: Bool = false) throws -> ClusterTLS {
        let node = try #require(foreignNodes[name])
        return try ClusterTLS(
            certificate: node.certificate, privateKey: node.privateKey, authority: trustingBoth ? bothAuthorities : foreignAuthority)
    }

    /// An authority's files.
    private struct Authority {
        let certificate: String
        let key: String
    }

    private static func makeAuthority(_ name: String, in root: String) throws -> Authority {
        let authority = Authority(certificate: "\(root)/\(name).pem", key: "\(root)/\(name).key")
        try openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", authority.key, "-out", authority.certificate, "-days", "30", "-subj", "/CN=\(name)",
        ])
        return authority
    }

    private static func makeNode(_ name: String, file: String, by authority: Authority, extensions: String, in root: String) throws -> Node {
        let node = Node(name: name, certificate: "\(root)/\(file).pem", privateKey: "\(root)/\(file).key")
        let request = "\(root)/\(file).csr"
        try openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", node.privateKey, "-out", request, "-subj", "/CN=\(name)",
        ])
        try openssl([
            "x509", "-req", "-in", request, "-CA", authority.certificate, "-CAkey", authority.key,
            "-set_serial", "\(UInt32.random(in: 1...UInt32.max))", "-days", "30", "-extfile", extensions, "-out", node.certificate,
        ])
        return node
    }

    /// Runs `openssl arguments…`; throws with its output unless it succeeds.
    private static func openssl(_ arguments: [String]) throws {
        let (status, output) = try ChildProcess.run(executable: "/usr/bin/env", ["openssl"] + arguments)
        guard status == 0 else {
            throw SpawnedProcess.Failure(description: "openssl \(arguments.joined(separator: " ")) exited \(status): \(output)")
        }
    }
}
