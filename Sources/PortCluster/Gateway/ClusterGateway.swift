import Glibc
import PermanentThread
import PortMessaging
import PortKitLocks

/// Where a node takes connections from other hosts for the names it holds: a port
/// listening on TCP that relays each connection's messages to the local owner of one name.
///
/// A remote caller (`ClusterNode.connect(toName:security:timeout:)`) connects to the
/// owner's node, asks for a name (the open request, `GatewayWire`), and from then on its
/// messages go to that name's owner on this host: one-way messages as they are, requests
/// with their replies coming back on the caller's connection. Owners need no TCP socket,
/// certificate or library of their own; the node's gateway is the one door of its host.
///
///     connected ──open NAME, owner here──▶ relaying to NAME's owner ──owner gone──▶ closed
///         │                                                                     ▲
///         └──open NAME, no owner here / anything else first──▶ refused ──────────┘
///
/// **Faults.** When the owner's port becomes invalid (its process died, or released the
/// name), every connection relaying to it is closed: remote senders fail with
/// `PortError.peerDied`, as they would next to it. A one-way message the owner cannot
/// take (its queue full for 5 s) closes the caller's connection too, rather than being
/// dropped unsaid. A request the owner does not answer within 60 s is refused
/// (`PortError.noReply`).
///
/// Only bytes cross hosts: a caller's message with a descriptor or a port never reaches
/// the gateway (the caller's connection refuses it with `PortError.cannotCrossHosts`).
///
/// **Limits.** A caller is held to `GatewayLimits` from the moment it is accepted: a small
/// first message, an open within a time-out, a cap on connections.
public final class ClusterGateway: Sendable {
    /// Where the gateway listens (with the port the kernel chose, when asked for port 0).
    public let address: PortAddress
    let thread: PermanentThread
    let port: ReceivePort
    let resolve: @Sendable (String) -> SendPort?
    /// What callers are allowed.
    public let limits: GatewayLimits
    /// The connection cap kept (`GatewayLimits.effectiveMaxConnections`).
    let maxConnections: Int
    let timeouts: PeerTimeouts
    let state = Locked(State())

    struct State {
        /// The callers' connections now (what the cap counts).
        var connections: Set<PortPeer> = []
        /// Connections closed as they came, over the cap.
        var refusedConnections = 0
        /// The requests of each connection waiting for the owner's answer.
        var waiting: [PortPeer: Int] = [:]
        /// The connections that opened a name, and the owner's port each relays to.
        var routes: [PortPeer: SendPort] = [:]
        /// The owners' ports, one per name, shared by every connection relaying to it.
        var owners: [String: SendPort] = [:]
        var closed = false
    }

    /// Starts a gateway listening at `address`, relaying to the ports `resolve` gives for
    /// the names callers open (`nil`: no owner of that name on this host). `resolve` runs
    /// on the gateway's thread, once per name while its port stays valid.
    /// - Parameters:
    ///   - address: a `.tcp(host:port:)` address; port 0 lets the kernel choose.
    ///   - security: how the callers' connections are protected.
    ///   - limits: what callers are allowed (`GatewayLimits`).
    ///   - resolve: the local owner's port of a name.
    /// - Throws: what `ReceivePort.listen(at:security:backlog:)` throws; `.system` when
    ///   the gateway's thread cannot start.
    public init(
        listeningAt address: PortAddress, security: TCPSecurity, limits: GatewayLimits = GatewayLimits(),
        resolve: @escaping @Sendable (String) -> SendPort?
    ) throws(PortError) {
        self.resolve = resolve
        self.limits = limits
        maxConnections = limits.effectiveMaxConnections
        port = ReceivePort(
            capacity: ReceivePort.defaultCapacity, maxMessageBytes: ReceivePort.defaultMaxMessageBytes,
            maxQueuedBytes: ReceivePort.defaultMaxQueuedBytes, maxFirstMessageBytes: GatewayLimits.maxOpenRequestBytes)
        try port.listen(at: address, security: security)
        self.address = port.listeningAddress ?? address
        thread = PermanentThread(name: "portkit.gateway")
        do { try thread.run() } catch {
            port.invalidate()
            throw .system(operation: "start the gateway's thread: \(error)", errno: EAGAIN)
        }
        guard let loop = thread.loop else { throw .invalidPort }
        timeouts = PeerTimeouts(
            loop: loop, limits: limits.timeouts, holdsSomething: { [state] peer in state.withLock { $0.waiting[peer] != nil } },
            expire: { peer, _ in peer.disconnect() })
        port.onPeerEvent { [weak self] event in
            switch event {
            case .connected(let peer): self?.admit(peer)
            case .disconnected(let peer, _): self?.forget(peer)
            }
        }
        do {
            try port.schedule(on: loop, deferringReplies: { [weak self] message, reply in self?.handle(message, reply: reply) })
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// Stops listening and closes every caller's connection.
    public func close() {
        let wasOpen = state.withLock { state -> Bool in
            defer { state.closed = true; state.routes = [:]; state.owners = [:] }
            return !state.closed
        }
        guard wasOpen else { return }
        timeouts.stop()
        port.invalidate()
        thread.stop()
    }

    /// How many callers' connections relay to a name now.
    public var relayingConnections: Int { state.withLock { $0.routes.count } }

    /// How many callers' connections are open now, opened or not.
    public var connections: Int { state.withLock { $0.connections.count } }

    /// How many connections were closed as they came, over the connection cap.
    public var refusedConnections: Int { state.withLock { $0.refusedConnections } }

    // MARK: On the gateway's thread

    /// A new connection: followed by the time-outs, or closed at once over the cap.
    private func admit(_ peer: PortPeer) {
        let admitted = state.withLock { state -> Bool in
            guard !state.closed, state.connections.count < maxConnections else {
                state.refusedConnections += 1
                return false
            }
            state.connections.insert(peer)
            return true
        }
        guard admitted else { return peer.disconnect() }
        timeouts.follow(peer)
    }

    private func handle(_ message: Message, reply: PendingReply?) {
        guard let peer = message.peer else { return }
        guard let owner = state.withLock({ $0.routes[peer] }) else { return open(message, from: peer, reply: reply) }
        timeouts.heard(peer)
        guard reply != nil else {
            return PortForwarding.forward(message, reply: reply, to: owner) { peer.disconnect() }
        }
        state.withLock { $0.waiting[peer, default: 0] += 1 }
        PortForwarding.forward(message, reply: reply, to: owner, dropCaller: { peer.disconnect() }) { [state, timeouts] in
            state.withLock { state in
                guard let count = state.waiting[peer] else { return }
                state.waiting[peer] = count > 1 ? count - 1 : nil
            }
            // Idle from its answer on, not from its request.
            timeouts.heard(peer)
        }
    }

    /// A connection's first message: the open request naming the owner it relays to.
    private func open(_ message: Message, from peer: PortPeer, reply: PendingReply?) {
        guard let reply, message.id == GatewayWire.openID, let name = GatewayWire.name(in: message) else {
            _ = reply?.reply(GatewayWire.answer(.protocolError, detail: "the first message must open a name"))
            return peer.disconnect()
        }
        guard let owner = owner(of: name) else {
            _ = reply.reply(GatewayWire.answer(.notHere, detail: "no owner of \(name) on this node"))
            return peer.disconnect()
        }
        let kept = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.routes[peer] = owner
            return true
        }
        guard kept else { return peer.disconnect() }
        timeouts.greeted(peer)
        _ = reply.reply(GatewayWire.answer(.opened))
    }

    /// The owner's port of `name`, from the cache, else resolved and watched.
    private func owner(of name: String) -> SendPort? {
        if let known = state.withLock({ $0.owners[name] }), known.isValid { return known }
        guard let found = resolve(name), found.isValid, let loop = thread.loop else { return nil }
        // The owner's replies are read here, where they are passed back: no other thread's
        // wake-up between the owner's answer and the caller's.
        try? found.readReplies(on: loop)
        state.withLock { $0.owners[name] = found }
        try? found.onInvalidation(on: loop) { [weak self] gone in self?.ownerGone(name, gone) }
        return found
    }

    /// Closes every connection relaying to `name`'s owner, whose port `gone` is invalid now.
    private func ownerGone(_ name: String, _ gone: SendPort) {
        let peers = state.withLock { state -> [PortPeer] in
            if state.owners[name] === gone { state.owners[name] = nil }
            return state.routes.compactMap { peer, owner in owner === gone ? peer : nil }
        }
        for peer in peers { peer.disconnect() }
    }

    private func forget(_ peer: PortPeer) {
        timeouts.forget(peer)
        state.withLock { state in
            state.routes.removeValue(forKey: peer)
            state.connections.remove(peer)
            state.waiting.removeValue(forKey: peer)
        }
    }
}
