import Glibc
import PermanentThread
import PortMessaging

/// A watch for a registered name's port having no client: made by
/// `NameRegistration.onIdle(after:_:)`, it calls its handler once the port has had no
/// client connection for its interval, so that a service started on demand can exit and be
/// started again by the next lookup.
///
/// A client is a connection into the port that another process made: each lookup of the
/// name makes one (the server makes it for the looker), which lasts until the looker
/// closes its `SendPort` or exits. The connection the registration itself made for the
/// server, which lookups are brokered through, does not count. So a client that holds its `SendPort` keeps the service from being idle,
/// whether it sends or not, as a Binder reference keeps a lazy service alive. Lookups from
/// the server's own process (an embedded server's) get in-process ports and are not seen.
///
/// ```
/// busy(clients) ──last client gone──▶ quiet(timer) ──interval passed──▶ idle (handler called)
///      ▲                                  │                               │
///      └────────a client connects─────────┴───────────────────────────────┘
/// any ──cancel, port invalidated──▶ cancelled
/// ```
public final class NameIdleWatch: Sendable {
    private let core: Core
    private let loop: ThreadLoop

    fileprivate init(core: Core, loop: ThreadLoop) {
        self.core = core
        self.loop = loop
    }

    /// Stops the watch: the handler is not called again. Safe from any thread, more than once.
    public func cancel() {
        let core = self.core
        if loop.isCurrent { core.cancel() } else { try? loop.perform { core.cancel() } }
    }

    /// The watch's state, on the port's loop only.
    // Safety of @unchecked Sendable: `phase` is read and changed only on `loop`'s thread
    // (the peer watcher and the timer run there, `start` and `cancel` are performed there);
    // the lets are immutable.
    fileprivate final class Core: @unchecked Sendable {
        enum Phase {
            /// Clients are connected (their peer ids).
            case busy(Set<UInt64>)
            /// No client since the timer was armed; it fires after the interval.
            case quiet(LoopTimer)
            /// The handler was called; nothing happens until a client connects.
            case idle
            case cancelled
        }

        let port: ReceivePort
        let loop: ThreadLoop
        let interval: Duration
        let handler: @Sendable () -> Void
        var phase = Phase.busy([])
        let ownPID = getpid()
        var token: UInt64?

        init(port: ReceivePort, loop: ThreadLoop, interval: Duration, handler: @escaping @Sendable () -> Void) {
            self.port = port
            self.loop = loop
            self.interval = interval
            self.handler = handler
        }

        /// Takes the clients connected now and follows the port's peers. On the loop.
        func start() {
            guard case .busy = phase else { return }
            // The port holds the watch (through its watcher) until it is cancelled or the
            // port invalidated: its caller need not keep the `NameIdleWatch`.
            token = port.watchPeers { event in self.peerEvent(event) }
            port.onInvalidation { [weak self, loop] _ in
                guard let core = self else { return }
                try? loop.perform { core.cancel() }
            }
            let clients = Set(port.connectedPeers.filter(isClient).map(\.id))
            phase = .busy(clients)
            if clients.isEmpty { becomeQuiet() }
        }

        /// Whether `peer` is a client: a connection this process made (the one the
        /// registration sent to the server) says so in its credentials, and is not.
        private func isClient(_ peer: PortPeer) -> Bool {
            peer.credentials?.pid != ownPID
        }

        private func peerEvent(_ event: PeerEvent) {
            switch (event, phase) {
            case (_, .cancelled): return
            case (.connected(let peer), .busy(var clients)):
                guard isClient(peer) else { return }
                clients.insert(peer.id)
                phase = .busy(clients)
            case (.connected(let peer), .quiet(let timer)):
                guard isClient(peer) else { return }
                timer.invalidate()
                phase = .busy([peer.id])
            case (.connected(let peer), .idle):
                guard isClient(peer) else { return }
                phase = .busy([peer.id])
            case (.disconnected(let peer, _), .busy(var clients)):
                guard clients.remove(peer.id) != nil else { return }
                phase = .busy(clients)
                if clients.isEmpty { becomeQuiet() }
            case (.disconnected, _):
                return
            }
        }

        private func becomeQuiet() {
            let timer = LoopTimer(after: interval) { _ in self.quietEnded() }
            phase = .quiet(timer)
            try? loop.add(timer, forMode: .default)
        }

        private func quietEnded() {
            guard case .quiet = phase else { return }
            phase = .idle
            handler()
        }

        func cancel() {
            if case .quiet(let timer) = phase { timer.invalidate() }
            phase = .cancelled
            if let token { port.stopWatchingPeers(token) }
            token = nil
        }
    }
}

extension NameRegistration {
    /// Calls `handler` on the port's loop once the port has had no client for `interval`
    /// (`NameIdleWatch` says what a client is), and again after each later time its
    /// clients come and go. The port must be scheduled on a loop.
    ///
    /// ```swift
    /// let registration = try names.blockingRegister("example.idle", port: port)
    /// try registration.onIdle(after: .seconds(30)) { exit(0) }   // started again by the next lookup
    /// ```
    /// - Parameters:
    ///   - interval: how long without a client counts as idle.
    ///   - handler: called on the port's loop's thread.
    /// - Returns: the watch, to cancel it; it lasts as long as the port otherwise.
    /// - Throws: `transport(.notScheduled)` when the port is not scheduled on a loop.
    @discardableResult
    public func onIdle(after interval: Duration, _ handler: @escaping @Sendable () -> Void) throws(NameServerError) -> NameIdleWatch {
        guard let loop = port.loopScheduledOn else {
            throw .transport(.notScheduled)
        }
        let core = NameIdleWatch.Core(port: port, loop: loop, interval: max(interval, .zero), handler: handler)
        if loop.isCurrent { core.start() } else { try? loop.perform { core.start() } }
        return NameIdleWatch(core: core, loop: loop)
    }
}
