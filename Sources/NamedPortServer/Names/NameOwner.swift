/// A registered name and the process that holds it, as the name server reports it.
public struct NameOwner: Hashable, Sendable, CustomStringConvertible {
    /// The registered name.
    public var name: String
    /// The owner's process id (SO_PEERCRED of its connection).
    public var pid: Int32
    /// The owner's user id (SO_PEERCRED of its connection). For a name on another node,
    /// the user of the name server that relays to it (whose process a lookup connects to).
    public var uid: UInt32
    /// For a name held on another node of a cluster (as a node's name server reports it),
    /// that node's name; `pid` is then the owner's on its node. `nil` for a name on this host.
    public var node: String?

    /// Makes an owner record.
    public init(name: String, pid: Int32, uid: UInt32, node: String? = nil) {
        self.name = name
        self.pid = pid
        self.uid = uid
        self.node = node
    }

    /// `NAME<TAB>PID<TAB>UID`, the line `portname list` prints, with `<TAB>NODE` after it
    /// for a name held on another node.
    public var description: String { "\(name)\t\(pid)\t\(uid)" + (node.map { "\t\($0)" } ?? "") }
}

/// A change seen by a watch: a name appeared (was registered) or vanished (was released,
/// or its owner's connection ended).
public enum NameEvent: Hashable, Sendable, CustomStringConvertible {
    /// The name was registered by `owner`.
    case appeared(NameOwner)
    /// The name, held by `owner`, was released.
    case vanished(NameOwner)

    /// The name and its owner.
    public var owner: NameOwner {
        switch self {
        case .appeared(let owner), .vanished(let owner): return owner
        }
    }

    /// `+ NAME PID UID` or `- NAME PID UID`, the line `portname watch` prints: the fields
    /// of a `list` line, in its order, after the sign (with ` NODE` for a name on another node).
    public var description: String {
        let fields = "\(owner.name) \(owner.pid) \(owner.uid)" + (owner.node.map { " \($0)" } ?? "")
        switch self {
        case .appeared: return "+ " + fields
        case .vanished: return "- " + fields
        }
    }
}
