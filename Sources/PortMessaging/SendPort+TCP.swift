import Glibc
import PermanentThread

extension SendPort {
    /// A send port connected over TCP to the port listening at `address`, on this host or
    /// another (as `security` allows). Requests and their replies, and one-way messages of
    /// bytes components, travel; descriptors and ports do not (`cannotCrossHosts`).
    /// - Parameters:
    ///   - address: `.tcp(host:port:)`; each address the host resolves to is tried in turn.
    ///   - security: how the connection is protected; `.plainLoopbackOnly` refuses any
    ///     host that is not a loopback address, before connecting; `.secured(by:)` allows
    ///     any, and returns once the connection is secured and the listening port has
    ///     accepted it.
    ///   - timeout: how long the connection's handshake may take in all (TCP's, and a
    ///     secured connection's own).
    /// - Throws: `.plainTCPRefused` (not loopback, or not a TCP address: use
    ///   `connect(to:timeout:)` for a Unix socket address), `.noListener` (the host
    ///   refused: nothing listens at that port), `.unreachable` (no answer within
    ///   `timeout`, no route to the host, or its name does not resolve),
    ///   `.handshakeFailed` (a secured connection's handshake failed or took too long:
    ///   either side refused the other's certificate), `.system`.
    public static func connect(to address: PortAddress, security: TCPSecurity, timeout: Duration = .seconds(10)) throws(PortError) -> SendPort {
        guard case .tcp(let host, let port) = address else {
            throw .plainTCPRefused(address: address.description, reason: "not a TCP address")
        }
        return SendPort(connection: try Connection.tcp(to: host, port: port, security: security, timeout: timeout))
    }

    /// Where a send port connected over TCP is connected to (`HOST:PORT`, `[HOST]:PORT`
    /// for IPv6); `nil` for any other port, or once its connection is closed.
    public var remoteAddress: String? {
        guard case .connection(let connection) = route else { return nil }
        return connection.remoteAddress
    }

    /// Who the port a secured send port is connected to proved to be
    /// (`TCPSecurity.secured(by:)`; for TLS, the common name of its certificate's
    /// subject); `nil` for any other port.
    public var remoteIdentity: String? {
        guard case .connection(let connection) = route else { return nil }
        return connection.remoteIdentity
    }
}
