/// How far a registered name reaches.
///
/// On a single host the two are the same. At a name server that is one node of a cluster
/// (`portnamed --etcd`), a name registered with `.cluster` scope is published in the
/// cluster's directory, unique across its nodes, and can be looked up from any of them; a
/// `.host` name stays on this host (another node may hold the same name for its own host,
/// and a lookup here finds this one).
public enum NameScope: UInt64, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// This host only: the default.
    case host = 0
    /// Every node of the cluster the server belongs to.
    case cluster = 1

    /// `host` or `cluster`.
    public var description: String {
        switch self {
        case .host: "host"
        case .cluster: "cluster"
        }
    }
}
