import PermanentThread
import Synchronization

/// Observers of a port's peers for the package's own layers (a registration's idle watch),
/// beside the one public observer (`onPeerEvent`), which they leave to the port's user.
extension ReceivePort {
    /// Calls `handler` with every later `PeerEvent` of the port, on its loop's thread, as
    /// `onPeerEvent(_:)` does; returns a token for `stopWatchingPeers(_:)`.
    package func watchPeers(_ handler: @escaping @Sendable (PeerEvent) -> Void) -> UInt64 {
        let token = peerWatcherTokens.wrappingAdd(1, ordering: .relaxed).oldValue
        state.withLock { $0.peerWatchers[token] = handler }
        return token
    }

    /// Stops the calls of the watcher `token` names.
    package func stopWatchingPeers(_ token: UInt64) {
        state.withLock { _ = $0.peerWatchers.removeValue(forKey: token) }
    }

    /// The peers of the port's connections from other processes now.
    package var connectedPeers: [PortPeer] {
        let peers = state.withLock { state in state.connections.values.compactMap(\.peer) }
        for peer in peers { peer.noteHandedOut() }
        return peers
    }

    /// The loop the port is scheduled on, if it is (`scheduledLoop`, for other modules).
    package var loopScheduledOn: ThreadLoop? { scheduledLoop }
}

/// The tokens of `watchPeers`, unique in the process.
private let peerWatcherTokens = Atomic<UInt64>(1)
