import PortMessaging

/// The names other nodes of a cluster hold, as this node's directory mirrors them: `list`
/// and the watches that ask for them show them beside this host's names, with their node.
/// A name a client here holds shows as this host's (a lookup here reaches that one); when it
/// is released, the other node's holder shows again.
extension NameService {
    /// Follows the directory's names of other nodes, from a snapshot on. The changes and
    /// the snapshot are applied on the loop's thread, in the order they were taken: a
    /// change already in the snapshot finds nothing to change.
    func followOtherNodes() {
        guard let directory else { return }
        directory.onOtherNodesNameChange { [weak self] name, holder in
            guard let self else { return }
            try? self.loop.perform { self.otherNodeChanged(name, holder) }
        }
        try? loop.perform { [self] in
            for (name, holder) in directory.otherNodesNames() { otherNodeChanged(name, holder) }
        }
    }

    /// Another node's name changed hands: its watchers here are told, unless a client here
    /// holds the name. On the loop's thread.
    func otherNodeChanged(_ name: String, _ holder: NameDirectoryHolder?) {
        guard !isShutDown else { return }
        let old = otherNodes[name]
        guard old != holder else { return }
        otherNodes[name] = holder
        guard table.holder(of: name) == nil else { return }
        if let old { tell(.vanished, otherNodeOwner(name, old), otherNodesOnly: true) }
        if let holder {
            tell(.appeared, otherNodeOwner(name, holder), otherNodesOnly: true)
            answerWaitersOnOtherNodes(for: name, holder)
        }
    }

    /// The names other nodes hold that `filter` matches (every one for `nil`) and no client
    /// here holds, sorted by name.
    func otherNodesOwners(matching filter: WatchFilter?) -> [NameOwner] {
        otherNodes.compactMap { name, holder -> NameOwner? in
            guard filter?.matches(name) ?? true, table.holder(of: name) == nil else { return nil }
            return otherNodeOwner(name, holder)
        }.sorted { $0.name < $1.name }
    }

    /// The owners field of a `list` or `watch` reply: this host's `owners`, and with
    /// `withOtherNodes` a second field of the other nodes' names that `filter` matches.
    func ownersFields(_ owners: [NameOwner], withOtherNodes: Bool, matching filter: WatchFilter?) -> [MessageComponent] {
        var fields = [NameField.owners(owners)]
        if withOtherNodes { fields.append(NameField.owners(otherNodesOwners(matching: filter), withNodes: true)) }
        return fields
    }

    /// An owner on another node, as this server reports it: its pid there, this server's
    /// uid (its process relays to it), and the node.
    func otherNodeOwner(_ name: String, _ holder: NameDirectoryHolder) -> NameOwner {
        NameOwner(name: name, pid: holder.pid, uid: serverUID, node: holder.node)
    }
}
