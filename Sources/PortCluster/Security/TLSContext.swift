import COpenSSL
import Glibc

/// An OpenSSL context configured for a cluster node: TLS 1.3 only, the node's certificate
/// and key, the cluster authority as the only trust, and every peer asked for a
/// certificate that authority issued (refused without one). Every connection's `SSL` is
/// made from it.
final class TLSContext: @unchecked Sendable {
    // @unchecked: the context is configured entirely in `init` and never changed after;
    // OpenSSL allows one configured SSL_CTX to make SSL objects on several threads at once
    // (its reference counts are atomic).
    let context: OpaquePointer
    /// The common name of the node's own certificate.
    let identity: String

    /// Loads and checks the three PEM files.
    /// - Throws: `ClusterTLSError`, naming the file at fault.
    init(certificate: String, privateKey: String, authority: String) throws(ClusterTLSError) {
        for path in [certificate, privateKey, authority] {
            if let failure = OpenSSLSupport.unreadable(path) { throw .unreadableFile(path: path, failure: failure) }
        }
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_method()) else {
            throw .openSSL(reason: OpenSSLSupport.drainErrors(or: "SSL_CTX_new failed"))
        }
        do throws(ClusterTLSError) {
            try Self.configure(context)
            guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
                throw .invalidCertificate(path: certificate, reason: OpenSSLSupport.drainErrors(or: "no certificate"))
            }
            guard SSL_CTX_use_PrivateKey_file(context, privateKey, SSL_FILETYPE_PEM) == 1 else {
                let reason = OpenSSLSupport.drainErrors(or: "no private key")
                // OpenSSL checks the key against the certificate as it loads it.
                if reason.contains("values mismatch") || reason.contains("key values mismatch") {
                    throw .keyDoesNotMatchCertificate(certificate: certificate, privateKey: privateKey)
                }
                throw .invalidPrivateKey(path: privateKey, reason: reason)
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                ERR_clear_error()
                throw .keyDoesNotMatchCertificate(certificate: certificate, privateKey: privateKey)
            }
            guard SSL_CTX_load_verify_locations(context, authority, nil) == 1 else {
                throw .invalidAuthority(path: authority, reason: OpenSSLSupport.drainErrors(or: "no certificate"))
            }
            guard let own = SSL_CTX_get0_certificate(context) else {
                throw .invalidCertificate(path: certificate, reason: "no certificate")
            }
            try Self.verify(own, in: context, certificate: certificate, authority: authority)
            guard let name = OpenSSLSupport.commonName(of: own) else { throw .certificateWithoutCommonName(path: certificate) }
            identity = name
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        self.context = context
    }

    /// The settings that do not depend on the files: TLS 1.3 at least, partial writes
    /// with a buffer that may move between a write and its retry, no tickets, no
    /// renegotiation, and mutual verification.
    private static func configure(_ context: OpaquePointer) throws(ClusterTLSError) {
        guard portkit_ssl_ctx_set_min_proto_version(context, TLS1_3_VERSION) == 1 else {
            throw .openSSL(reason: OpenSSLSupport.drainErrors(or: "TLS 1.3 is not available"))
        }
        _ = portkit_ssl_ctx_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = SSL_CTX_set_options(context, portkit_ssl_options())
        _ = SSL_CTX_set_num_tickets(context, 0)
        // Both sides verify the other; a server also refuses a client that presents no
        // certificate (the flag means nothing to a client).
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
    }

    /// Checks that the node's own certificate chains to the authority, as its peers will.
    private static func verify(
        _ own: OpaquePointer, in context: OpaquePointer, certificate: String, authority: String
    ) throws(ClusterTLSError) {
        guard let store = SSL_CTX_get_cert_store(context), let check = X509_STORE_CTX_new() else {
            throw .openSSL(reason: OpenSSLSupport.drainErrors(or: "X509_STORE_CTX_new failed"))
        }
        defer { X509_STORE_CTX_free(check) }
        guard X509_STORE_CTX_init(check, store, own, portkit_ssl_ctx_chain(context)) == 1 else {
            throw .openSSL(reason: OpenSSLSupport.drainErrors(or: "X509_STORE_CTX_init failed"))
        }
        guard X509_verify_cert(check) == 1 else {
            let reason = String(cString: X509_verify_cert_error_string(Int(X509_STORE_CTX_get_error(check))))
            ERR_clear_error()
            throw .certificateNotFromAuthority(certificate: certificate, authority: authority, reason: reason)
        }
    }

    deinit { SSL_CTX_free(context) }
}
