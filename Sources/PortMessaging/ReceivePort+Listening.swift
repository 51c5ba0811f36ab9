import Glibc
import PermanentThread

/// A port as a server: listening at an address, and the peers that connect to it.
extension ReceivePort {
    /// Listens at `address`: every process of the machine can then reach this port with
    /// `SendPort.connect(to:)`, each peer a connection into it, delivered to its handler on
    /// its loop (once it is scheduled) like any other message.
    /// - Parameters:
    ///   - address: a socket path or an abstract name.
    ///   - permissions: the socket file's mode (default 0600: this user only); ignored for
    ///     an abstract name.
    ///   - backlog: how many connections may wait to be taken.
    /// - Throws: `.addressInUse` (a live listener is there; a stale socket file is
    ///   replaced), `.alreadyListening`, `.invalidPort`, `.system`; `.plainTCPRefused` for
    ///   a TCP address (use `listen(at:security:backlog:)`).
    public func listen(at address: PortAddress, permissions: mode_t = 0o600, backlog: Int32 = 128) throws(PortError) {
        if case .tcp = address { throw .plainTCPRefused(address: address.description, reason: TCPSecurity.notAskedFor) }
        if state.withLock({ $0.listener != nil }) { throw .alreadyListening }
        try install(try PortListener.open(address, permissions: permissions, backlog: backlog))
    }

    /// Listens on a listening Unix stream socket made by someone else (systemd socket
    /// activation passes one as descriptor 3): like `listen(at:)`, but the port takes the
    /// descriptor over and, on invalidation, closes it without removing the socket file
    /// (its maker's).
    /// - Throws: `.system(EINVAL)` if `descriptor` is not a listening Unix stream socket,
    ///   `.alreadyListening`, `.invalidPort`.
    public func listen(onSocket descriptor: CInt) throws(PortError) {
        if state.withLock({ $0.listener != nil }) { throw .alreadyListening }
        try install(try PortListener.adopt(descriptor))
    }

    /// Makes `listener` the port's, and starts it once the port is scheduled.
    func install(_ listener: PortListener) throws(PortError) {
        let outcome = state.withLock { state -> Result<Schedule?, PortError> in
            guard state.valid else { return .failure(.invalidPort) }
            guard state.listener == nil else { return .failure(.alreadyListening) }
            state.listener = listener
            return .success(state.schedule)
        }
        switch outcome {
        case .failure(let error):
            listener.close()
            throw error
        case .success(let schedule):
            if let schedule { listener.start(on: schedule.loop, modes: schedule.modes, into: self) }
        }
    }

    /// Where the port listens (`listen(at:)`), if anywhere; for a TCP address asked with
    /// port 0, the port the kernel chose.
    public var listeningAddress: PortAddress? { state.withLock { $0.listener?.address } }

    /// Reports every connection into the port from another process as it is made and as
    /// it ends (`PeerEvent`), on the port's loop thread, in order: a peer's `.connected`
    /// before its first message, its `.disconnected` after its last. Connections made
    /// before the port was scheduled are reported once it is. One observer per port; a
    /// later call replaces it. Call it before `schedule`, so that no peer is missed.
    public func onPeerEvent(_ handler: @escaping @Sendable (PeerEvent) -> Void) {
        state.withLock { $0.peerObserver = handler }
    }

    /// Whether peer events go anywhere (an observer or a watcher).
    var reportsPeerEvents: Bool {
        state.withLock { $0.peerObserver != nil || !$0.peerWatchers.isEmpty }
    }

    /// Hands `event` to the peer observer on the port's loop thread (now, when this is
    /// it); nothing when there is no observer or the port is not scheduled.
    func report(_ event: PeerEvent) {
        guard let (observer, watchers, loop) = state.withLock({
            state -> ((@Sendable (PeerEvent) -> Void)?, [@Sendable (PeerEvent) -> Void], ThreadLoop)? in
            guard state.peerObserver != nil || !state.peerWatchers.isEmpty, let loop = state.schedule?.loop else { return nil }
            return (state.peerObserver, Array(state.peerWatchers.values), loop)
        }) else { return }
        switch event {
        case .connected(let peer), .disconnected(let peer, _): peer.noteHandedOut()
        }
        let tell: @Sendable () -> Void = {
            observer?(event)
            for watcher in watchers { watcher(event) }
        }
        if loop.isCurrent { tell() } else { try? loop.perform(tell) }
    }
}
