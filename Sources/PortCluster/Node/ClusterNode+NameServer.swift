import NamedPortServer

/// A node as the `NameDirectory` of a name server on its host: the names registered there
/// with `.cluster` scope are published on the node's lease, with the node's gateway.
extension ClusterNode {
    /// Publishes the names a name server of this node publishes with `address`, where the
    /// node's gateway takes connections (`ClusterGateway.address`), so that other nodes
    /// can reach them. Names already published keep the address they had.
    public func advertise(gatewayAddress address: String) {
        state.withLock { $0.gatewayAddress = address }
    }

    /// Publishes `owner`'s name, registered at a name server of this node with
    /// `.cluster` scope, without waiting (`publish(_:owner:waitingUpTo:)` with `.zero`): a
    /// name another node claimed in the same instant is reported as `ClusterEvent.lost`.
    public func nameRegistered(_ owner: NameOwner) {
        let address = state.withLock { $0.gatewayAddress }
        _ = publish(owner.name, owner: ClusterOwner(node: node, pid: owner.pid, address: address), waitingUpTo: .zero)
    }

    /// Whether this node holds `name` for the cluster, or will publish it once the
    /// directory answers: what its gateway may open for other hosts. Unlike `owner(of:)`,
    /// which is the mirror's word (and may trail this node's own publication), this is the
    /// node's own.
    public func holdsForCluster(_ name: String) -> Bool {
        state.withLock { $0.mine[name] != nil }
    }

    /// Withdraws `owner`'s name, released at a name server of this node (`withdraw(_:)`,
    /// which does not wait).
    public func nameReleased(_ owner: NameOwner) {
        withdraw(owner.name)
    }
}

extension ClusterNode {
    /// The names other nodes hold, from the mirror: what a name server of this node lists
    /// and watches beside its own (`NameDirectory`).
    public func otherNodesNames() -> [String: NameDirectoryHolder] {
        let node = node
        return state.withLock { state in state.mirror.compactMapValues { Self.holder($0, otherThan: node) } }
    }

    /// Calls `handler`, on the node's thread, with each later change of a name other nodes
    /// hold, as the mirror sees it (`ClusterEvent.ownerChanged`): its holder, or `nil` when
    /// the name is free or this node's.
    public func onOtherNodesNameChange(_ handler: @escaping @Sendable (String, NameDirectoryHolder?) -> Void) {
        let node = node
        onEvent { event in
            guard case .ownerChanged(let name, let owner) = event else { return }
            handler(name, owner.flatMap { Self.holder($0, otherThan: node) })
        }
    }

    /// `owner` as a holder on another node; `nil` when it is `node` (this one).
    private static func holder(_ owner: ClusterOwner, otherThan node: String) -> NameDirectoryHolder? {
        owner.node == node ? nil : NameDirectoryHolder(node: owner.node, pid: owner.pid)
    }
}
