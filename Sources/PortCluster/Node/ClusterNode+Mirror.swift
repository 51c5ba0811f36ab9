extension ClusterNode {
    // MARK: The mirror (on the node's thread)

    /// Messages from the watch: their changes, into the mirror.
    func readWatch(_ messages: [[UInt8]], epoch: Int) {
        do throws(DirectoryError) {
            for message in messages {
                for change in try EtcdWatch.changes(in: message) { apply(change) }
            }
        } catch {
            linkLost(error, epoch: epoch)
        }
    }

    private func apply(_ change: DirectoryChange) {
        guard change.key.hasPrefix(prefix) else { return }
        let name = String(change.key.dropFirst(prefix.count))
        let owner: ClusterOwner?
        switch change {
        case .put(let entry): owner = ClusterOwner(directoryValue: entry.value)
        case .delete: owner = nil
        }
        let changed = state.withLock { state -> Bool in
            guard state.mirror[name] != owner else { return false }
            state.mirror[name] = owner
            return true
        }
        if changed { report(.ownerChanged(name, owner)) }
    }

    /// Replaces the mirror with `entries`, reporting only the names whose owner changed.
    func refreshMirror(_ entries: [DirectoryEntry]) {
        var fresh: [String: ClusterOwner] = [:]
        for entry in entries where entry.key.hasPrefix(prefix) {
            if let owner = ClusterOwner(directoryValue: entry.value) { fresh[String(entry.key.dropFirst(prefix.count))] = owner }
        }
        let old = state.withLock { state -> [String: ClusterOwner] in
            defer { state.mirror = fresh }
            return state.mirror
        }
        for name in old.keys.sorted() where fresh[name] == nil { report(.ownerChanged(name, nil)) }
        for (name, owner) in fresh.sorted(by: { $0.key < $1.key }) where old[name] != owner { report(.ownerChanged(name, owner)) }
    }
}
