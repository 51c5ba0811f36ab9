import FoundationEssentials

/// Who holds a name in the cluster: the node, the process on it, and where its node
/// accepts connections from other hosts.
public struct ClusterOwner: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The node's name (unique in the cluster, chosen by its operator).
    public var node: String
    /// The owning process's id on that node.
    public var pid: Int32
    /// Where the node accepts connections from other hosts, `HOST:PORT` (empty: nowhere yet).
    public var address: String

    /// An owner.
    public init(node: String, pid: Int32, address: String = "") {
        self.node = node
        self.pid = pid
        self.address = address
    }

    /// "process P on node N".
    public var description: String { "process \(pid) on node \(node)" }

    /// The value a name's key holds in the directory: this owner as JSON,
    /// `{"node":…,"pid":…,"address":…}`.
    public var directoryValue: [UInt8] {
        (try? JSONEncoder().encode(self)).map(Array.init) ?? Array("{}".utf8)
    }

    /// The owner a name's directory value names, or `nil` for a value PortKit did not write.
    public init?(directoryValue bytes: [UInt8]) {
        guard let owner = try? JSONDecoder().decode(ClusterOwner.self, from: Data(bytes)) else { return nil }
        self = owner
    }
}

/// What a node reports about its link to the directory and the names in it.
public enum ClusterEvent: Sendable, Equatable {
    /// The directory answers (again); the node's names are published.
    case directoryUp
    /// The directory stopped answering; names of this host keep working, cluster
    /// operations wait (publications are kept and made when it is back).
    case directoryDown(DirectoryError)
    /// A name of this node is published, cluster-wide.
    case published(String)
    /// A name of this node could not be (re)published: another node took it meanwhile
    /// (while the directory was down, or while this node's lease had expired).
    case lost(String, to: ClusterOwner)
    /// A name's owner in the cluster changed (`nil`: the name is free): every node's, as the
    /// node's watch sees it.
    case ownerChanged(String, ClusterOwner?)
}

/// What publishing a name came to.
public enum ClusterPublication: Sendable, Equatable {
    /// The name is this node's, cluster-wide.
    case published
    /// Another node holds it.
    case taken(by: ClusterOwner)
    /// The directory is down: the name is kept, and published when it is back (a
    /// `ClusterEvent` says how that went).
    case pending(DirectoryError)
}
