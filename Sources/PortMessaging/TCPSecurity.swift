/// How a port's TCP connections are protected, asked for explicitly wherever a port listens
/// or connects over TCP (`ReceivePort.listen(at:security:backlog:)`,
/// `SendPort.connect(to:security:timeout:)`): nothing goes over TCP by default.
///
/// Either plain TCP on loopback (`plainLoopbackOnly`), or a stream security that secures
/// each connection before a message crosses it (`secured(by:)`), on any address.
public struct TCPSecurity: Sendable {
    /// The two kinds of protection.
    enum Kind: Sendable {
        case plainLoopbackOnly
        case secured(any StreamSecurity)
    }

    let kind: Kind

    /// Plain TCP, neither encrypted nor authenticated, and so allowed on loopback addresses
    /// only (`127.0.0.0/8`, `::1`): a host name must resolve to loopback addresses alone.
    /// Any other address (`0.0.0.0` included) is refused with `PortError.plainTCPRefused`.
    /// The kernel names no sender over TCP: `Message.sender` and `PortPeer.credentials`
    /// are `nil`, and `PortPeer.remoteAddress` says where the peer connected from.
    public static let plainLoopbackOnly = TCPSecurity(kind: .plainLoopbackOnly)

    /// Every connection secured by `security` (TLS, say) before a message crosses it, on any
    /// address. The connecting side finishes its handshake before `SendPort.connect`
    /// returns; the listening side finishes each one on the port's loop before the peer
    /// becomes a connection into the port, and closes one that fails or takes longer than
    /// `ReceivePort.handshakeTimeout`. A failed handshake is `PortError.handshakeFailed`.
    /// The verified peer is named by `PortPeer.remoteIdentity` and `SendPort.remoteIdentity`.
    /// As over plain TCP, only bytes travel (`PortError.cannotCrossHosts`).
    /// - Parameter security: what secures each connected socket.
    public static func secured(by security: any StreamSecurity) -> TCPSecurity {
        TCPSecurity(kind: .secured(security))
    }

    /// The stream security, when the connections are secured.
    var streamSecurity: (any StreamSecurity)? {
        if case .secured(let security) = kind { security } else { nil }
    }
}
