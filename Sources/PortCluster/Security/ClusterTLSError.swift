import PermanentThread

/// Why a `ClusterTLS` could not be made from its files. Each names the file at fault.
public enum ClusterTLSError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The file cannot be read (missing, or not readable by this process): `failure` is
    /// the `open` that failed, with its `errno`.
    case unreadableFile(path: String, failure: SystemCallError)
    /// The node's certificate file holds no valid PEM certificate.
    case invalidCertificate(path: String, reason: String)
    /// The private key file holds no valid PEM private key.
    case invalidPrivateKey(path: String, reason: String)
    /// The private key is not the one of the node's certificate.
    case keyDoesNotMatchCertificate(certificate: String, privateKey: String)
    /// The cluster authority's file holds no valid PEM certificate.
    case invalidAuthority(path: String, reason: String)
    /// The node's certificate was not issued by the cluster authority (so every peer would
    /// refuse it); `reason` is the verification's.
    case certificateNotFromAuthority(certificate: String, authority: String, reason: String)
    /// The certificate's subject has no common name, which names the node to its peers.
    case certificateWithoutCommonName(path: String)
    /// OpenSSL could not make a TLS context; `reason` is its own.
    case openSSL(reason: String)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .unreadableFile(let path, let failure): "cannot read \(path): \(failure)"
        case .invalidCertificate(let path, let reason): "\(path) holds no valid PEM certificate: \(reason)"
        case .invalidPrivateKey(let path, let reason): "\(path) holds no valid PEM private key: \(reason)"
        case .keyDoesNotMatchCertificate(let certificate, let privateKey):
            "the private key in \(privateKey) is not the key of the certificate in \(certificate)"
        case .invalidAuthority(let path, let reason): "\(path) holds no valid PEM authority certificate: \(reason)"
        case .certificateNotFromAuthority(let certificate, let authority, let reason):
            "the certificate in \(certificate) is not issued by the authority in \(authority): \(reason)"
        case .certificateWithoutCommonName(let path): "the certificate in \(path) has no subject common name"
        case .openSSL(let reason): "OpenSSL: \(reason)"
        }
    }
}
