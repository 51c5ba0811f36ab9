/// Where a listening `ReceivePort` can be reached from any process of the machine
/// (CFMessagePortCreateLocal's name, as a Unix socket address).
public enum PortAddress: Sendable, Hashable, CustomStringConvertible {
    /// A socket file at this path (at most 107 bytes). The listening port makes it with the
    /// permissions it is given and removes it when it is invalidated; a stale file (no one
    /// listening) is replaced, a live one is refused with `PortError.addressInUse`.
    case path(String)
    /// A Linux abstract socket name: no file to make, guard or clean up; the name is free
    /// again as soon as its port is invalidated (or its process dies). Anyone on the
    /// machine's network namespace can connect: check `Message.sender`.
    case abstract(String)

    /// The path, or `@` and the abstract name.
    public var description: String {
        switch self {
        case .path(let path): path
        case .abstract(let name): "@" + name
        }
    }

    var name: String {
        switch self {
        case .path(let path): path
        case .abstract(let name): name
        }
    }

    var isAbstract: Bool { if case .abstract = self { true } else { false } }
}
