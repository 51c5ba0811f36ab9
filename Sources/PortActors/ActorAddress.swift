import Glibc

/// Where a distributed actor lives: the identity (`ActorID`) of actors of a
/// `PortActorSystem`.
///
/// An address names the process of the actor's system (`pid`, and `node` when that
/// process is on another node of a cluster) and the actor in it (`id`, unique in its
/// system for the system's life). `name` is the name it was found by, if any: it says how
/// to find the actor again, and is not part of its identity (two addresses of one actor,
/// one found by name and one handed over in a call, are equal).
public struct ActorAddress: Hashable, Codable, Sendable, CustomStringConvertible {
    /// The name the actor was registered or found under, if any.
    public var name: String?
    /// The cluster node of the actor's process, for an actor found on another node;
    /// `nil` for this host.
    public var node: String?
    /// The process of the actor's system (on `node`, for an actor on another node).
    public var pid: Int32
    /// The actor, within its process (ids are not reused while the process lives).
    public var id: UInt64

    /// Makes an address.
    public init(name: String? = nil, node: String? = nil, pid: Int32, id: UInt64) {
        self.name = name
        self.node = node
        self.pid = pid
        self.id = id
    }

    /// Whether the actor lives in this process.
    public var isInThisProcess: Bool { node == nil && pid == getpid() }

    /// Equal when they name the same actor of the same process: `name` is left out.
    public static func == (lhs: ActorAddress, rhs: ActorAddress) -> Bool {
        lhs.pid == rhs.pid && lhs.id == rhs.id && lhs.node == rhs.node
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(pid)
        hasher.combine(id)
        hasher.combine(node)
    }

    /// `name@node/pid#id`, the parts that are set.
    public var description: String {
        (name.map { "\($0)@" } ?? "") + (node.map { "\($0)/" } ?? "") + "\(pid)#\(id)"
    }
}
