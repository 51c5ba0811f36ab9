import Foundation
import PermanentThread
import PortCluster
import PortKitTestSupport
import Testing

/// `ClusterTLS` made from files: the node's name read from its certificate, and a typed
/// error naming the file for each way the files can be wrong.
@Suite("ClusterTLS configuration")
struct TLSConfigurationTests {
    @Test func aNodeIsNamedByItsCertificate() throws {
        let directory = TestDirectory()
        let certificates = try TestCertificates.make(nodes: ["node-7"], in: directory)
        let tls = try certificates.tls("node-7")
        #expect(tls.identity == "node-7")
        #expect(tls.authority == certificates.authority)
    }

    @Test func wrongFilesAreRefusedWithTypedErrors() throws {
        let directory = TestDirectory()
        let certificates = try TestCertificates.make(nodes: ["a", "b"], in: directory)
        let a = try #require(certificates.nodes["a"])
        let b = try #require(certificates.nodes["b"])
        let foreignA = try #require(certificates.foreignNodes["a"])
        let missing = directory.path + "/missing.pem"
        let garbage = directory.path + "/garbage.pem"
        try "not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        let authority = certificates.authority

        #expect(throws: ClusterTLSError.unreadableFile(path: missing, failure: SystemCallError(operation: "open", errno: ENOENT))) {
            try ClusterTLS(certificate: missing, privateKey: a.privateKey, authority: authority)
        }
        #expect(throws: ClusterTLSError.unreadableFile(path: missing, failure: SystemCallError(operation: "open", errno: ENOENT))) {
            try ClusterTLS(certificate: a.certificate, privateKey: a.privateKey, authority: missing)
        }
        #expect(throws: ClusterTLSError.keyDoesNotMatchCertificate(certificate: a.certificate, privateKey: b.privateKey)) {
            try ClusterTLS(certificate: a.certificate, privateKey: b.privateKey, authority: authority)
        }
        expectError(try ClusterTLS(certificate: garbage, privateKey: a.privateKey, authority: authority)) {
            if case .invalidCertificate(garbage, _) = $0 { true } else { false }
        }
        expectError(try ClusterTLS(certificate: a.certificate, privateKey: garbage, authority: authority)) {
            if case .invalidPrivateKey(garbage, _) = $0 { true } else { false }
        }
        expectError(try ClusterTLS(certificate: a.certificate, privateKey: a.privateKey, authority: garbage)) {
            if case .invalidAuthority(garbage, _) = $0 { true } else { false }
        }
        expectError(try ClusterTLS(certificate: foreignA.certificate, privateKey: foreignA.privateKey, authority: authority)) {
            if case .certificateNotFromAuthority(foreignA.certificate, authority, _) = $0 { true } else { false }
        }
    }

    /// Records an issue unless `make` throws a `ClusterTLSError` that `matches`.
    private func expectError(
        _ make: @autoclosure () throws -> ClusterTLS, sourceLocation: SourceLocation = #_sourceLocation,
        _ matches: (ClusterTLSError) -> Bool
    ) {
        do {
            _ = try make()
            Issue.record("the files were accepted", sourceLocation: sourceLocation)
        } catch let error as ClusterTLSError {
            #expect(matches(error), "refused with \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("refused with \(error), not a ClusterTLSError", sourceLocation: sourceLocation)
        }
    }
}
