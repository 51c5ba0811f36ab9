import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    // MARK: Connections to other hosts

    /// Refuses, before anything is encoded or made, a message that carries what cannot
    /// travel on this connection's medium to another host: a file descriptor, a port, a
    /// reply port (a request's reply comes back on its own connection without one).
    /// Nothing to check on a Unix socket or pipes (pipes refuse descriptors when written).
    /// - Throws: `.cannotCrossHosts`, saying what.
    @inline(__always)
    func checkCanTravel(_ message: Message) throws(PortError) {
        guard medium.crossesHosts else { return }
        if message.replyPort != nil { throw .cannotCrossHosts("a reply port") }
        for component in message.parts {
            switch component {
            case .data: continue
            case .port: throw .cannotCrossHosts("a port")
            case .descriptor: throw .cannotCrossHosts("a file descriptor")
            }
        }
    }

    /// The peer's address as `HOST:PORT` (`[HOST]:PORT` for IPv6) for a TCP connection,
    /// plain or secured; `nil` for any other medium, or once the connection is closed.
    var remoteAddress: String? {
        let socket: FileDescriptor
        switch medium {
        case .tcp(let fd), .secured(let fd, _): socket = fd
        case .socket, .pipes: return nil
        }
        guard let address = try? usingDescriptors("getpeername", { () throws(Errno) in try socket.peerAddress() }),
            let host = address.numericHost
        else { return nil }
        return PortAddress.tcp(host: host, port: address.port).description
    }

    /// A connection to the port listening at `host`:`port` over TCP, tried on each address
    /// the host resolves to (as `security` allows) until one answers or `timeout` has
    /// passed; a secured one once its handshake is done (`secureConnecting`).
    /// - Throws: `.plainTCPRefused` (plain TCP to an address that is not loopback),
    ///   `.noListener` (every address refused), `.unreachable` (no answer in time, no
    ///   route, no such host), `.handshakeFailed`, `.system`.
    static func tcp(to host: String, port: UInt16, security: TCPSecurity, timeout: Duration) throws(PortError) -> Connection {
        let described = PortAddress.tcp(host: host, port: port).description
        let deadline = ContinuousClock.now + timeout
        let addresses = try resolve(host, port: port, security: security, described: described)
        var last: Errno?
        for address in addresses where ContinuousClock.now < deadline {
            let socket: FileDescriptor
            do { socket = try TCPSocket.connect(to: address, deadline: deadline) } catch {
                last = error
                continue
            }
            guard let streamSecurity = security.streamSecurity else { return Connection(.tcp(socket)) }
            return try secureConnecting(
                socket, with: streamSecurity, host: host, described: described, timeout: timeout, deadline: deadline)
        }
        switch last?.rawValue {
        case ECONNREFUSED?: throw .noListener(described)
        case nil, ETIMEDOUT?: throw .unreachable(address: described, reason: "no answer within \(timeout)")
        case EHOSTUNREACH?, ENETUNREACH?: throw .unreachable(address: described, reason: "\(last!)")
        case .some: throw PortError("connect \(described)", last!)
        }
    }

    /// The addresses `host` resolves to, each one allowed by `security` (plain TCP: loopback
    /// only; secured: any).
    /// - Throws: `.plainTCPRefused` (an address that is not loopback), `.unreachable` (the
    ///   name did not resolve).
    static func resolve(
        _ host: String, port: UInt16, security: TCPSecurity, described: String, passive: Bool = false
    ) throws(PortError) -> [TCPSocket.Address] {
        let addresses: [TCPSocket.Address]
        do { addresses = try TCPSocket.resolve(host, port: port, passive: passive) } catch {
            throw .unreachable(address: described, reason: error.description)
        }
        guard !addresses.isEmpty else { throw .unreachable(address: described, reason: "\(host) resolves to no address") }
        switch security.kind {
        case .secured:
            break  // any address: the stream security protects the bytes
        case .plainLoopbackOnly:
            if let outside = addresses.first(where: { !$0.isLoopback }) {
                throw .plainTCPRefused(
                    address: described,
                    reason: "\(outside.numericHost ?? host) is not a loopback address (127.0.0.0/8, ::1); plain TCP is for loopback only")
            }
        }
        return addresses
    }
}
