import PermanentThread

extension ClusterNode {
    // MARK: The link (all on the node's thread)

    /// Brings the link up: a lease (the last one if it still lives), the mirror read and
    /// diffed, this node's names published again, a watch from the revision after the read.
    func connect() {
        guard !state.withLock({ $0.closed }) else { return }
        if case .up = state.withLock({ $0.link }) { return }
        do throws(DirectoryError) {
            var lease: DirectoryLease?
            if let last = state.withLock({ $0.lastLease }) {
                do throws(DirectoryError) {
                    _ = try etcd.keepAlive(last)
                    lease = DirectoryLease(id: last, ttl: leaseTTL)
                } catch .leaseNotFound {
                    lease = nil  // expired while the link was down: the names went with it
                }
            }
            let current: DirectoryLease
            if let lease { current = lease } else { current = try etcd.grantLease(ttl: leaseTTL) }
            state.withLock { $0.lastLease = current.id }
            let (entries, revision) = try etcd.list(prefix: prefix)
            refreshMirror(entries)
            var outcomes: [ClusterEvent] = []
            for (name, owner) in state.withLock({ $0.mine }) {
                switch try claim(name, owner: owner, lease: current.id) {
                case .published: outcomes.append(.published(name))
                case .taken(let other): outcomes.append(.lost(name, to: other))
                case .pending: break
                }
            }
            let watch = try etcd.watch(prefix: prefix, fromRevision: revision + 1)
            guard let descriptor = watch.descriptor else { throw .unavailable(endpoint: etcd.endpoint, reason: "the watch closed") }
            let source = DescriptorSource(descriptor: descriptor, events: .readable) { [weak self] _, _ in self?.readWatch() }
            try? thread.loop?.add(source, forMode: .common)
            state.withLock { state in
                state.link = .up(lease: current, watch: watch, source: source)
                state.retryDelay = Self.firstRetry
            }
            report(.directoryUp)
            for outcome in outcomes { report(outcome) }
            // Changes the watch read along with its creation wake no readiness: taken now.
            readWatch()
        } catch {
            linkLost(error)
        }
    }

    /// Renews the lease (a timer, every third of its time to live). A lease found expired
    /// (the node was paused too long) means the names went: the link is made again.
    func renew() {
        guard case .up(let lease, _, _) = state.withLock({ $0.link }) else { return }
        do throws(DirectoryError) {
            try etcd.keepAlive(lease.id)
        } catch .leaseNotFound {
            _ = replaceLink(with: .down(nil))
            state.withLock { $0.lastLease = nil }
            connect()
        } catch {
            linkLost(error)
        }
    }

    /// The directory stopped answering: the link goes down and is tried again later.
    func linkLost(_ error: DirectoryError) {
        // Reported once per outage: when the link was up, or had never come up.
        switch replaceLink(with: .down(error)) {
        case .up, .down(nil): report(.directoryDown(error))
        case .down: break
        }
        scheduleRetry()
    }

    /// Sets the link to `next` and returns what it was; an up link's watch and its source
    /// end here.
    func replaceLink(with next: Link) -> Link {
        let previous = state.withLock { state -> Link in
            defer { state.link = next }
            return state.link
        }
        if case .up(_, let watch, let source) = previous {
            source.invalidate()
            watch.cancel()
        }
        return previous
    }

    private func scheduleRetry() {
        let delay = state.withLock { state -> Duration? in
            guard !state.closed else { return nil }
            defer { state.retryDelay = min(state.retryDelay * 2, Self.lastRetry) }
            return state.retryDelay
        }
        guard let delay, let loop = thread.loop else { return }
        let retry = LoopTimer(after: delay) { [weak self] _ in self?.connect() }
        try? loop.add(retry, forMode: .common)
    }

    /// The watch's socket is readable: the changes that came, into the mirror.
    func readWatch() {
        guard case .up(_, let watch, _) = state.withLock({ $0.link }) else { return }
        do throws(DirectoryError) {
            for change in try watch.next(timeout: .zero) { apply(change) }
        } catch {
            linkLost(error)
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
    private func refreshMirror(_ entries: [DirectoryEntry]) {
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
