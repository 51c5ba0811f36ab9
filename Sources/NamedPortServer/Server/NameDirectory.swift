import PortMessaging

/// What a name server asks before it registers a name when it is one node of a cluster:
/// who holds the name on another node. `PortCluster`'s `ClusterNode` answers from its
/// mirror of the cluster's directory.
///
/// A server started with one (`NameServer.start(at:policy:events:directory:)`) tells it of
/// every name registered with `.cluster` scope (`publish`, `withdraw`), and refuses to
/// register one another node holds, with `NameServerError.nameTakenElsewhere`. The
/// answer is the mirror's: two nodes registering a name in the same instant may both
/// accept it, and then the directory keeps the first claim (the other node says so).
///
/// A lookup at the server of a name no process here holds but another node does is
/// answered with the port `remotePort(for:completion:)` gives: a port in this process
/// relaying to the owner on its node (bytes and requests travel; descriptors and ports do
/// not).
public protocol NameDirectory: Sendable {
    /// The node and process holding `name` on another node of the cluster, if any.
    func holder(of name: String) -> NameDirectoryHolder?

    /// Calls `completion`, on any thread, with a port in this process that relays to
    /// `name`'s owner on another node, or `nil` when no other node holds it or it cannot
    /// be reached. It must not wait on the calling thread (a name server's): connecting
    /// happens elsewhere. The default gives `nil` at once: names on other nodes cannot be
    /// looked up here.
    func remotePort(for name: String, completion: @escaping @Sendable (SendPort?) -> Void)

    /// A name was registered at the server with `.cluster` scope: publish it. Called on
    /// the server's thread, which it must not hold up. The default does nothing.
    func nameRegistered(_ owner: NameOwner)

    /// A name registered with `.cluster` scope was released (unregistered, or its owner's
    /// connection ended): withdraw it. Called on the server's thread, as `nameRegistered`
    /// is.
    func nameReleased(_ owner: NameOwner)

    /// Every name other nodes hold now, and its holder: what the server's `list` and a new
    /// watch show beside its own names. The default is none.
    func otherNodesNames() -> [String: NameDirectoryHolder]

    /// Calls `handler`, on any thread, with each later change of a name other nodes hold:
    /// its holder now, or `nil` once no other node holds it. The server passes these on
    /// to its watchers. The default never calls it.
    func onOtherNodesNameChange(_ handler: @escaping @Sendable (String, NameDirectoryHolder?) -> Void)
}

extension NameDirectory {
    /// Publishes nothing.
    public func nameRegistered(_ owner: NameOwner) {}

    /// Withdraws nothing.
    public func nameReleased(_ owner: NameOwner) {}

    /// No names on other nodes.
    public func otherNodesNames() -> [String: NameDirectoryHolder] { [:] }

    /// No changes to tell.
    public func onOtherNodesNameChange(_ handler: @escaping @Sendable (String, NameDirectoryHolder?) -> Void) {}

    /// No port to names on other nodes.
    public func remotePort(for name: String, completion: @escaping @Sendable (SendPort?) -> Void) {
        completion(nil)
    }
}

/// A name's holder on another node.
public struct NameDirectoryHolder: Sendable, Hashable {
    /// The node's name.
    public var node: String
    /// The holding process's id on that node.
    public var pid: Int32

    /// A holder.
    public init(node: String, pid: Int32) {
        self.node = node
        self.pid = pid
    }
}
