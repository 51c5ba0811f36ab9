import PermanentThread

extension ClusterNode {
    // MARK: The link (all on the node's thread)
    //
    // down ──connect──► connecting: keep-alive of the last lease (or a grant), list,
    //                   claims one by one, watch opened ──► up ──renew (a timer)──┐
    //   ▲                                  │                        ▲            │
    //   └──── a call fails (linkLost) ◄────┴────────────────────────┴────────────┘
    // Each step is one call through `calls`, whose completion makes the next: the loop
    // never waits. A completion from an earlier link (`epoch`) is not acted on.

    /// Brings the link up, if it is down: a lease (the last one if it still lives), the
    /// mirror read and diffed, this node's names published again, a watch from the
    /// revision after the read.
    func connect() {
        let started = state.withLock { state -> (epoch: Int, lastLease: Int64?)? in
            guard !state.closed, case .down = state.link else { return nil }
            state.epoch += 1
            state.link = .connecting(watch: nil)
            return (state.epoch, state.lastLease)
        }
        guard let (epoch, lastLease) = started else { return }
        guard let lastLease else { return grantLease(epoch: epoch) }
        step(.keepAlive(lastLease), epoch: epoch) { [self] result in
            switch result {
            case .success: listNames(lease: DirectoryLease(id: lastLease, ttl: leaseTTL), epoch: epoch)
            case .failure(.leaseNotFound): grantLease(epoch: epoch)  // expired while down: its names went with it
            case .failure(let error): linkLost(error, epoch: epoch)
            }
        }
    }

    private func grantLease(epoch: Int) {
        step(.grantLease(ttl: leaseTTL), epoch: epoch) { [self] result in
            switch result {
            case .success(let lease): listNames(lease: lease, epoch: epoch)
            case .failure(let error): linkLost(error, epoch: epoch)
            }
        }
    }

    private func listNames(lease: DirectoryLease, epoch: Int) {
        state.withLock { $0.lastLease = lease.id }
        step(.list(prefix: prefix), epoch: epoch) { [self] result in
            switch result {
            case .success(let (entries, revision)):
                refreshMirror(entries)
                claimNext(lease: lease, revision: revision, claimed: [], outcomes: [], epoch: epoch)
            case .failure(let error): linkLost(error, epoch: epoch)
            }
        }
    }

    /// Claims this node's names one by one (in name order), then opens the watch.
    private func claimNext(lease: DirectoryLease, revision: Int64, claimed: Set<String>, outcomes: [ClusterEvent], epoch: Int) {
        let next = state.withLock { state in state.mine.filter { !claimed.contains($0.key) }.min { $0.key < $1.key } }
        guard let (name, owner) = next else { return openWatch(lease: lease, revision: revision, claimed: claimed, outcomes: outcomes, epoch: epoch) }
        claim(name, owner: owner, lease: lease.id) { [self] result in
            guard isCurrent(epoch) else { return }
            var outcomes = outcomes
            switch result {
            case .success(.published): outcomes.append(.published(name))
            case .success(.taken(let other)): outcomes.append(.lost(name, to: other))
            case .success(.pending): break
            case .failure(let error): return linkLost(error, epoch: epoch)
            }
            claimNext(lease: lease, revision: revision, claimed: claimed.union([name]), outcomes: outcomes, epoch: epoch)
        }
    }

    private func openWatch(lease: DirectoryLease, revision: Int64, claimed: Set<String>, outcomes: [ClusterEvent], epoch: Int) {
        guard let loop = thread.loop else { return }
        let watch = etcd.loopDriver(on: loop)
        state.withLock { $0.link = .connecting(watch: watch) }
        let endpoint = etcd.endpoint
        watch.openStream(
            "/v3/watch", body: EtcdWatch.request(prefix: prefix, fromRevision: revision + 1).bytes,
            opened: { [self] result in
                guard isCurrent(epoch) else { return }
                switch result {
                case .success(200): linkUp(lease: lease, watch: watch, claimed: claimed, outcomes: outcomes, epoch: epoch)
                case .success(let status): linkLost(.refused(code: 2, message: "watch: HTTP status \(status)"), epoch: epoch)
                case .failure(let failure): linkLost(.unavailable(endpoint: endpoint, reason: failure.description), epoch: epoch)
                }
            },
            messages: { [self] result in
                guard isCurrent(epoch) else { return }
                switch result {
                case .success(let messages): readWatch(messages, epoch: epoch)
                case .failure(let failure): linkLost(.unavailable(endpoint: endpoint, reason: failure.description), epoch: epoch)
                }
            })
    }

    private func linkUp(lease: DirectoryLease, watch: HTTPLoopDriver, claimed: Set<String>, outcomes: [ClusterEvent], epoch: Int) {
        let (late, withdrawn) = state.withLock { state in
            state.link = .up(lease: lease, watch: watch)
            state.retryDelay = Self.firstRetry
            state.reportedDown = false
            return (state.mine.filter { !claimed.contains($0.key) }, state.withdrawnMeanwhile.subtracting(state.mine.keys))
        }
        report(.directoryUp)
        for outcome in outcomes { report(outcome) }
        // Names withdrawn while the link was down may still be on this lease; names
        // published while it was coming up are claimed now.
        for name in withdrawn.sorted() { delete(name, lease: lease.id, epoch: epoch) }
        for (name, owner) in late.sorted(by: { $0.key < $1.key }) {
            claim(name, owner: owner, lease: lease.id) { [self] result in
                switch result {
                case .success(let outcome): reportOutcome(outcome, of: name)
                case .failure(let error): linkLost(error, epoch: epoch)
                }
            }
        }
    }

    /// Renews the lease (a timer, every third of its time to live), unless a renewal is
    /// under way. A lease found expired (the node was paused too long) means the names
    /// went: the link is made again.
    func renew() {
        let current = state.withLock { state -> (DirectoryLease, Int)? in
            guard case .up(let lease, _) = state.link, !state.renewing else { return nil }
            state.renewing = true
            return (lease, state.epoch)
        }
        guard let (lease, epoch) = current else { return }
        step(.keepAlive(lease.id), epoch: epoch) { [self] result in
            state.withLock { $0.renewing = false }
            switch result {
            case .success: break
            case .failure(.leaseNotFound):
                _ = replaceLink(with: .down(nil))
                state.withLock { $0.lastLease = nil }
                connect()
            case .failure(let error): linkLost(error, epoch: epoch)
            }
        }
    }

    /// The directory stopped answering: the link goes down (the calls still queued fail
    /// with it) and is tried again later. Nothing, if the link is no longer `epoch`'s.
    func linkLost(_ error: DirectoryError, epoch: Int) {
        guard isCurrent(epoch) else { return }
        _ = replaceLink(with: .down(error))
        // Reported once per outage: when the link was up, or had never come up.
        let report = state.withLock { state -> Bool in
            defer { state.reportedDown = true }
            return !state.reportedDown
        }
        calls.close()
        if report { self.report(.directoryDown(error)) }
        scheduleRetry()
    }

    /// Whether `epoch` is the current link's (or attempt's) and the node is open.
    func isCurrent(_ epoch: Int) -> Bool {
        state.withLock { !$0.closed && $0.epoch == epoch }
    }

    /// Sets the link to `next` and returns what it was; a link's (or attempt's) watch ends
    /// here, and the completions of its calls are no longer acted on.
    func replaceLink(with next: Link) -> Link {
        let previous = state.withLock { state -> Link in
            defer {
                state.link = next
                state.epoch += 1
                state.renewing = false
            }
            return state.link
        }
        switch previous {
        case .up(_, let watch), .connecting(let watch?): watch.close()
        case .connecting(nil), .down: break
        }
        return previous
    }

    /// Makes `call` through `calls`; `then` runs with its result if the link is still
    /// `epoch`'s.
    private func step<Value>(_ call: EtcdCall<Value>, epoch: Int, then: @escaping (Result<Value, DirectoryError>) -> Void) {
        etcd.perform(call, on: calls) { [self] result in
            guard isCurrent(epoch) else {
                if case .failure = result { state.withLock { $0.renewing = false } }
                return
            }
            then(result)
        }
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
}
