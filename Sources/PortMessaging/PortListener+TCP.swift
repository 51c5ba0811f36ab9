import Glibc
import PermanentThread
import PortKitSystem

extension PortListener {
    /// Binds a listening TCP socket to `host`:`port` (port 0: the kernel's choice), the
    /// address as `security` allows it (any, for a secured one, whose connections are
    /// then secured before the port takes them). Its `address` names the port it got.
    /// - Throws: `.plainTCPRefused`, `.unreachable` (the host did not resolve),
    ///   `.addressInUse`, `.system`.
    static func openTCP(host: String, port: UInt16, security: TCPSecurity, backlog: CInt) throws(PortError) -> PortListener {
        let asked = PortAddress.tcp(host: host, port: port).description
        let addresses = try Connection.resolve(host, port: port, security: security, described: asked, passive: true)
        do {
            let (socket, bound) = try TCPSocket.listen(at: addresses[0], backlog: backlog)
            return PortListener(address: .tcp(host: host, port: bound), socket: socket, madeFile: nil, streamSecurity: security.streamSecurity)
        } catch {
            throw error.rawValue == EADDRINUSE ? .addressInUse(asked) : PortError("listen on \(asked)", error)
        }
    }
}

extension TCPSecurity {
    /// Why a TCP address given to a call without a `security` parameter is refused.
    static let notAskedFor = "TCP must be asked for with a TCPSecurity (plainLoopbackOnly, or secured(by:))"
}

extension ReceivePort {
    /// Listens at a TCP address: every process that can reach it connects with
    /// `SendPort.connect(to:security:timeout:)`, each peer a connection into this port,
    /// as with a Unix socket address (its handler, requests answered on the connection,
    /// `onPeerEvent`, `PortPeer.disconnect()`).
    ///
    /// Over TCP only bytes travel: a message with a descriptor or a port, or with a reply
    /// port, is refused with `cannotCrossHosts` by whichever side sends it (a request's
    /// reply comes back on its connection without one). The kernel names no sender:
    /// `Message.sender` and `PortPeer.credentials` are `nil`, and `PortPeer.remoteAddress`
    /// is where the peer connected from (and, secured, `PortPeer.remoteIdentity` who it is).
    /// - Parameters:
    ///   - address: `.tcp(host:port:)`; port 0 lets the kernel choose, and
    ///     `listeningAddress` then names the port it chose. When the host resolves to
    ///     several addresses, the port listens on the first.
    ///   - security: how the connections are protected; `.plainLoopbackOnly` refuses any
    ///     host that is not a loopback address; `.secured(by:)` allows any, and secures
    ///     each connection on the port's loop before it becomes a peer of the port (one
    ///     that fails or takes longer than `handshakeTimeout` is closed, and the port goes
    ///     on serving the others).
    ///   - backlog: how many connections may wait to be taken.
    /// - Throws: `.plainTCPRefused` (not loopback, or not a TCP address: use
    ///   `listen(at:permissions:backlog:)` for a Unix socket address), `.addressInUse`,
    ///   `.unreachable` (the host does not resolve), `.alreadyListening`, `.invalidPort`,
    ///   `.system`.
    public func listen(at address: PortAddress, security: TCPSecurity, backlog: Int32 = 128) throws(PortError) {
        guard case .tcp(let host, let port) = address else {
            throw .plainTCPRefused(address: address.description, reason: "not a TCP address")
        }
        if state.withLock({ $0.listener != nil }) { throw .alreadyListening }
        try install(try PortListener.openTCP(host: host, port: port, security: security, backlog: backlog))
    }

    /// Takes ownership of an accepted TCP socket whose peer speaks the PortKit wire
    /// protocol, as `adoptConnection` does a Unix socket's.
    func adoptTCPConnection(_ socket: FileDescriptor) throws(PortError) {
        try adopt(Connection(.tcp(socket), limits: limits, firstFrameLimits: firstMessageLimits))
    }

    /// Takes ownership of an accepted TCP socket secured by `stream` (its handshake
    /// complete), as `adoptTCPConnection` does a plain one.
    func adoptSecuredConnection(_ socket: FileDescriptor, _ stream: any SecuredStream) throws(PortError) {
        try adopt(Connection(.secured(socket, stream), limits: limits, firstFrameLimits: firstMessageLimits))
    }

    /// How long an accepted connection's handshake may take (`TCPSecurity.secured(by:)`)
    /// before the listening port closes it.
    public static let handshakeTimeout: Duration = .seconds(10)

    /// The most handshakes a listening port secures at once (256, or an eighth of the
    /// process's descriptor limit if less). When that many are under way, the oldest of
    /// those whose peer has sent nothing yet (else the oldest) is closed to make room for a
    /// newcomer: a peer that connects and stays silent cannot lock the others out.
    public static var maxPendingHandshakes: Int { PortListener.maxPendingHandshakes }
}
