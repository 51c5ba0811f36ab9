import PermanentThread
import PortKitLocks

/// A publication's outcome, handed from the node's loop to a caller of `publish` that
/// waits for it, or left to an event once that caller has stopped waiting.
final class PublicationReply: Sendable {
    /// Where the reply is.
    private enum Phase {
        case waiting
        case answered(ClusterPublication)
        case abandoned
    }

    private let phase = ConditionLock(Phase.waiting)

    /// Hands over `outcome`: whether the caller takes it (`false`: it stopped waiting).
    func answer(_ outcome: ClusterPublication) -> Bool {
        let taken = phase.withLock { phase -> Bool in
            guard case .waiting = phase else { return false }
            phase = .answered(outcome)
            return true
        }
        if taken { phase.broadcast() }
        return taken
    }

    /// The outcome, waiting until `deadline`; `nil` then, and the outcome goes to an event.
    func wait(until deadline: ContinuousClock.Instant) -> ClusterPublication? {
        let outcome = phase.wait(until: deadline) { phase -> ClusterPublication? in
            if case .answered(let outcome) = phase { return outcome }
            return nil
        }
        if let outcome { return outcome }
        return phase.withLock { phase -> ClusterPublication? in
            if case .answered(let outcome) = phase { return outcome }  // it came just now
            phase = .abandoned
            return nil
        }
    }
}

extension ClusterNode {
    // MARK: Claims and withdrawals (on the node's thread)

    /// Keeps `name` as `owner`'s and claims it if the link is up; `completion` is called
    /// with the outcome (at once, `.pending`, while the link is not up).
    func publishHere(_ name: String, owner: ClusterOwner, completion: @escaping (ClusterPublication) -> Void) {
        let (link, epoch) = state.withLock { state -> (Link, Int) in
            state.mine[name] = owner
            state.withdrawnMeanwhile.remove(name)
            return (state.link, state.epoch)
        }
        guard case .up(let lease, _) = link else {
            if case .down(let reason?) = link { return completion(.pending(reason)) }
            return completion(.pending(.unavailable(endpoint: etcd.endpoint, reason: "connecting")))
        }
        claim(name, owner: owner, lease: lease.id) { [self] result in
            switch result {
            case .success(let outcome): completion(outcome)
            case .failure(let error):
                linkLost(error, epoch: epoch)
                completion(.pending(error))
            }
        }
    }

    /// Forgets `name` and deletes it from the lease if the link is up; a deletion that
    /// cannot be made now is made when the link is next up.
    func withdrawHere(_ name: String) {
        let (link, epoch) = state.withLock { state -> (Link?, Int) in
            guard state.mine.removeValue(forKey: name) != nil else { return (nil, state.epoch) }
            return (state.link, state.epoch)
        }
        guard let link else { return }
        guard case .up(let lease, _) = link else {
            state.withLock { _ = $0.withdrawnMeanwhile.insert(name) }
            return
        }
        delete(name, lease: lease.id, epoch: epoch)
    }

    /// Deletes `name` from `lease`; kept to be deleted later when that fails.
    func delete(_ name: String, lease: Int64, epoch: Int) {
        etcd.perform(.delete(prefix + name, ifOnLease: lease), on: calls) { [self] result in
            switch result {
            case .success:
                state.withLock { _ = $0.withdrawnMeanwhile.remove(name) }
            case .failure(let error):
                state.withLock { state in
                    if state.mine[name] == nil { state.withdrawnMeanwhile.insert(name) }
                }
                linkLost(error, epoch: epoch)
            }
        }
    }

    /// Claims `name` on `lease`: published, or taken by another lease's holder.
    func claim(
        _ name: String, owner: ClusterOwner, lease: Int64, completion: @escaping (Result<ClusterPublication, DirectoryError>) -> Void
    ) {
        etcd.perform(.create(prefix + name, value: owner.directoryValue, lease: lease), on: calls) { [self] result in
            completion(result.map { claim -> ClusterPublication in
                switch claim {
                case .created:
                    return .published
                case .taken(let holder) where holder.lease == lease:
                    return .published  // ours already (published before the link went down)
                case .taken(let holder):
                    state.withLock { _ = $0.mine.removeValue(forKey: name) }
                    return .taken(by: ClusterOwner(directoryValue: holder.value) ?? ClusterOwner(node: "?", pid: 0))
                }
            })
        }
    }
}
