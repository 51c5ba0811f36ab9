import COpenSSL
import Glibc
import PortMessaging

/// TLS for a cluster's TCP ports: `TCPSecurity.secured(by: ClusterTLS(...))`.
///
/// Every node holds a certificate issued by the cluster's own certificate authority, and
/// trusts that authority alone. Authentication is mutual: both sides present their
/// certificates and each verifies the other's against the authority; a peer without a
/// certificate, or with one from any other authority, is refused on either side
/// (`PortError.handshakeFailed` where it connects). Only TLS 1.3 is spoken. The verified
/// peer is named by its certificate's subject common name (`PortPeer.remoteIdentity`,
/// `SendPort.remoteIdentity`); any certificate of the authority is accepted, whatever the
/// host connected to, so a server that serves only some nodes checks that name.
///
/// One value serves any number of connections, both ways, from any thread.
public struct ClusterTLS: StreamSecurity {
    /// The PEM file of this node's certificate (and any intermediate certificates after it).
    public let certificate: String
    /// The PEM file of the certificate's private key.
    public let privateKey: String
    /// The PEM file of the cluster's certificate authority.
    public let authority: String
    /// This node's name as its peers see it: its certificate's subject common name.
    public var identity: String { context.identity }

    private let context: TLSContext

    /// Loads this node's certificate, its key and the cluster authority, and checks that
    /// they belong together.
    /// - Parameters:
    ///   - certificate: the PEM file of the node's certificate, issued by the authority,
    ///     with a subject common name.
    ///   - privateKey: the PEM file of its private key (unencrypted).
    ///   - authority: the PEM file of the cluster's certificate authority.
    /// - Throws: `ClusterTLSError`: a file unreadable or not PEM, a key that is not the
    ///   certificate's, a certificate the authority did not issue, or without a common name.
    public init(certificate: String, privateKey: String, authority: String) throws(ClusterTLSError) {
        self.certificate = certificate
        self.privateKey = privateKey
        self.authority = authority
        context = try TLSContext(certificate: certificate, privateKey: privateKey, authority: authority)
    }

    /// A TLS stream over `socket`, its handshake not begun.
    /// - Parameters:
    ///   - socket: a connected, non-blocking TCP socket, which the stream never closes.
    ///   - role: which side this is; a connecting side names the host it asked for to
    ///     the server (when it is a name, not a numeric address).
    /// - Throws: `PortError.handshakeFailed` when OpenSSL cannot make the connection's state.
    public func secure(socket: Int32, as role: StreamRole) throws(PortError) -> any SecuredStream {
        try TLSStream(context: context, socket: socket, role: role)
    }
}
