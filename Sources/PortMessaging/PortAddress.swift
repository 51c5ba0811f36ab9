/// Where a listening `ReceivePort` can be reached: from any process of the machine at a
/// Unix socket address (CFMessagePortCreateLocal's name), or over TCP.
public enum PortAddress: Sendable, Hashable, CustomStringConvertible {
    /// A socket file at this path (at most 107 bytes). The listening port makes it with the
    /// permissions it is given and removes it when it is invalidated; a stale file (no one
    /// listening) is replaced, a live one is refused with `PortError.addressInUse`.
    case path(String)
    /// A Linux abstract socket name: no file to make, guard or clean up; the name is free
    /// again as soon as its port is invalidated (or its process dies). Anyone on the
    /// machine's network namespace can connect: check `Message.sender`.
    case abstract(String)
    /// A TCP host (a name or a numeric IPv4 or IPv6 address, without brackets) and port.
    /// Plain TCP is allowed only when asked for (`TCPSecurity.plainLoopbackOnly`) and only
    /// on loopback; what cannot cross hosts (descriptors, ports) is refused with
    /// `PortError.cannotCrossHosts`. Listening on port 0 lets the kernel choose one, which
    /// `ReceivePort.listeningAddress` then names.
    case tcp(host: String, port: UInt16)

    /// The path, `@` and the abstract name, or `HOST:PORT` (`[HOST]:PORT` for an IPv6 host).
    public var description: String {
        switch self {
        case .path(let path): path
        case .abstract(let name): "@" + name
        case .tcp(let host, let port): (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
        }
    }

    /// The TCP address `text` names, as `description` writes one: `HOST:PORT`, or
    /// `[HOST]:PORT` for an IPv6 host; `nil` for anything else (no port, a port that is
    /// not a number from 0 to 65535, an empty host).
    public init?(tcp text: String) {
        let host: Substring
        let port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, let number = UInt16(port) else { return nil }
        self = .tcp(host: String(host), port: number)
    }

    /// The socket path or abstract name of a Unix socket address (the host of a TCP one).
    var name: String {
        switch self {
        case .path(let path): path
        case .abstract(let name): name
        case .tcp(let host, _): host
        }
    }

    var isAbstract: Bool { if case .abstract = self { true } else { false } }
}
