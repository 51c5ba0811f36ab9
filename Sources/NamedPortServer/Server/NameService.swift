import Glibc
import PermanentThread
import PortMessaging

/// The name server's service on its thread: a listening `ReceivePort` whose requests are
/// the name operations, and whose peers are the clients.
///
/// Single-threaded by design: every change (a register, a client's end, a watch starting)
/// happens in one callback of the server's loop, so a watch's snapshot and its
/// subscription are taken together with nothing in between, and a dead client's names are
/// gone, and its watchers told, before the loop sleeps again.
// Safety of @unchecked Sendable: every mutable property is read and written only on
// `loop`'s thread. The entry points are the port's handler and peer observer, the timers,
// and blocks performed on the loop (`shutdown`, `counts`); all run there. The lets are
// immutable.
final class NameService: @unchecked Sendable {
    // Internal, not private, only so that the service's other file (requests) reaches them.
    let loop: ThreadLoop
    let policy: NameServerPolicy
    let port: ReceivePort
    let address: String
    /// Who holds a name on another node, when the server is a cluster's node.
    let directory: (any NameDirectory)?
    let serverPID = getpid()
    let serverUID = UInt32(getuid())

    /// Names, watches and waiting lookups. A client is its peer's id; a registration keeps
    /// a send port to the owner's port.
    var table: NameTable<SendPort, PendingLookup>
    /// Every connected peer, by id (refused ones too, until they are told).
    var clients: [UInt64: Client] = [:]
    /// The admitted clients (what the connection limit counts).
    var admitted = 0
    /// Where each watch's events go: the port its watcher passed.
    var watchPorts: [WatchKey: WatchTarget] = [:]
    /// The names other nodes hold, as the directory says (a cluster's node only).
    var otherNodes: [String: NameDirectoryHolder] = [:]
    /// The names registered with `.cluster` scope, which the directory published.
    var clusterScoped: Set<String> = []
    /// Refusal counters and the event handler.
    var statistics: ServerStatistics
    /// The monitors, and the connections tapped for them (NameService+Monitor.swift).
    var monitoring = MonitorBoard()
    /// The clients' time-outs: hello, request, idle.
    lazy var timeouts = PeerTimeouts(
        loop: loop,
        limits: PeerTimeouts.Limits(
            greeting: policy.helloTimeout, greetingName: "say hello", request: policy.requestTimeout, idle: policy.idleTimeout),
        holdsSomething: { [unowned self] peer in self.table.holdsSomething(peer.id) },
        expire: { [unowned self] peer, reason in
            if let client = self.clients[peer.id] { self.disconnect(client, because: reason) }
        })
    var isShutDown = false
    /// The services started on demand and not yet reaped (NameService+Activation.swift).
    var activation = ActivationState()

    /// One client: its peer, who it is, and where it stands with the time-outs.
    final class Client {
        let peer: PortPeer
        let pid: Int32
        let uid: UInt32
        /// Why the client is refused, answered to its first request (then it is disconnected).
        let refusal: NameServerError?
        var saidHello = false

        init(peer: PortPeer, refusal: NameServerError?) {
            self.peer = peer
            pid = peer.credentials?.pid ?? 0
            uid = peer.credentials.map { UInt32($0.uid) } ?? UInt32.max
            self.refusal = refusal
        }
    }

    init(
        loop: ThreadLoop, port: ReceivePort, address: String, policy: NameServerPolicy, events: NameServerEventHandler?,
        directory: (any NameDirectory)? = nil
    ) {
        self.loop = loop
        self.port = port
        self.address = address
        self.directory = directory
        self.policy = policy
        self.table = NameTable(limits: NameTable.Limits(
            names: policy.maxNamesPerConnection, watches: policy.maxWatchesPerConnection,
            waitingLookups: policy.maxWaitingLookupsPerConnection))
        self.statistics = ServerStatistics(events: events)
    }

    /// Starts serving: observes the port's peers and schedules it on the loop.
    func start() throws(NameServerError) {
        followOtherNodes()
        port.onPeerEvent { [unowned self] event in self.peerEvent(event) }
        do {
            try port.schedule(on: loop, inModes: [.default]) { [unowned self] message, pending in
                self.receive(message, pending)
            }
        } catch {
            throw .transport(error)
        }
    }

    /// Ends every client and the port. On the loop's thread.
    func shutdown() {
        guard !isShutDown else { return }
        isShutDown = true
        timeouts.stop()
        stopActivations()
        let released = table.removeAll()
        for waiter in released.waiters { waiter.waiting.end() }
        for holder in released.holders {
            holder.channel?.invalidate()
            holder.notices?.invalidate()
        }
        for watch in watchPorts.values { watch.port.invalidate() }
        watchPorts = [:]
        endMonitoring()
        clients = [:]
        admitted = 0
        port.invalidate()
    }

    /// Counts of what the server holds, for tests and diagnostics. On the loop's thread.
    var counts: NameServerCounts {
        NameServerCounts(
            connections: admitted, names: table.nameCount, waitingLookups: table.waiterCount, watches: table.watchCount,
            bufferedRequestBytes: clients.values.reduce(0) { $0 + $1.peer.partialMessageBytes })
    }

    // MARK: Clients

    private func peerEvent(_ event: PeerEvent) {
        guard !isShutDown else { return }
        switch event {
        case .connected(let peer):
            let uid = peer.credentials.map { UInt32($0.uid) } ?? UInt32.max
            var refusal: NameServerError?
            var reason = ""
            if !policy.admits(uid) {
                reason = "uid \(uid) may not use the name server of uid \(serverUID)"
                refusal = .permissionDenied(reason: reason)
            } else if admitted >= policy.maxConnections {
                reason = NameServerError.limitExceeded(what: "connections", limit: policy.maxConnections).description
                refusal = .serverBusy(address: address, reason: reason)
            }
            let client = Client(peer: peer, refusal: refusal)
            clients[peer.id] = client
            if refusal != nil {
                statistics.refusedConnection(pid: client.pid, uid: client.uid, reason: reason)
            } else {
                admitted += 1
                statistics.report(.connectionOpened(pid: client.pid, uid: client.uid))
            }
            timeouts.follow(peer)
        case .disconnected(let peer, _):
            guard let client = clients.removeValue(forKey: peer.id) else { return }
            timeouts.forget(peer)
            if client.refusal == nil {
                admitted -= 1
                statistics.report(.connectionClosed(pid: client.pid, uid: client.uid))
            }
            release(client)
        }
    }

    /// Forgets what a gone client held: its waiting lookups and watches are dropped, its
    /// names released in name order and their watchers told.
    func release(_ client: Client) {
        dropStandbys(table.dropStandbys(client: client.peer.id))
        let released = table.release(client: client.peer.id)
        for waiter in released.waiters { waiter.waiting.end() }
        for key in watchPorts.keys where key.connectionID == client.peer.id {
            watchPorts.removeValue(forKey: key)?.port.invalidate()
        }
        endMonitors(of: client.peer.id)
        // Watchers first: telling them is the latency that counts; closing the released
        // ports' connections costs more, and nothing waits for it.
        for holder in released.holders { notifyWatchers(.vanished, holder.owner) }
        handOver(released.holders)
        for holder in released.holders { holder.channel?.invalidate() }
    }

    /// Ends `client`'s connection; its names go when the port reports it gone.
    func disconnect(_ client: Client, because reason: String) {
        statistics.refusedConnection(pid: client.pid, uid: client.uid, reason: reason)
        client.peer.disconnect()
    }

    // MARK: Watches

    /// Tells every watch that sees `owner.name` of the change. A watch whose port does not
    /// take the event at once (its watcher far behind, or gone) ends: its port is closed,
    /// which the watcher sees as its watch's end, never as a gap.
    func notifyWatchers(_ notice: NameNotice, _ owner: NameOwner) {
        statistics.report(notice == .appeared ? .nameRegistered(owner) : .nameReleased(owner))
        // Each set asked only when it holds something: a name's hash is not free, and a
        // server outside a cluster has neither.
        if notice == .vanished, !clusterScoped.isEmpty, clusterScoped.remove(owner.name) != nil {
            directory?.nameReleased(owner)
        }
        // A name another node holds shows as this host's while a client here holds it.
        let elsewhere = otherNodes.isEmpty ? nil : otherNodes[owner.name].map { otherNodeOwner(owner.name, $0) }
        if notice == .appeared, let elsewhere { tell(.vanished, elsewhere, otherNodesOnly: true) }
        tell(notice, owner)
        if notice == .vanished, let elsewhere { tell(.appeared, elsewhere, otherNodesOnly: true) }
    }

    /// Sends the event to the watches of its name (with `otherNodesOnly`, those that asked
    /// for other nodes' names); a watch whose port does not take it ends.
    func tell(_ notice: NameNotice, _ owner: NameOwner, otherNodesOnly: Bool = false) {
        var fields = [NameField.string(owner.name), NameField.integer(owner.pid), NameField.integer(owner.uid)]
        if let node = owner.node { fields.append(NameField.string(node)) }
        let event = Message(id: notice.rawValue, components: fields)
        for key in table.watchers(of: owner.name) {
            guard let watch = watchPorts[key], watch.withOtherNodes || !otherNodesOnly else { continue }
            do {
                try watch.port.send(event, timeout: .zero)
            } catch {
                endWatch(key)
            }
        }
    }

    /// Ends a watch from the server's side (its port failed or died).
    func endWatch(_ key: WatchKey) {
        table.unwatch(key.watchID, client: key.connectionID)
        watchPorts.removeValue(forKey: key)?.port.invalidate()
    }
}

/// Where a watch's events go: the port its watcher passed, and whether it asked for the
/// names other nodes hold too.
struct WatchTarget {
    let port: SendPort
    let withOtherNodes: Bool
}

/// What a waiting lookup keeps until it is answered: the reply it owes, and the timer that
/// ends the wait. Touched only on the server's thread.
final class PendingLookup {
    let reply: PendingReply
    /// `lookup` wants a connection to the owner; `owner` only the owner's identity.
    let wantsPort: Bool
    /// A name another node holds answers it too.
    let withOtherNodes: Bool
    var timer: LoopTimer?

    init(reply: PendingReply, wantsPort: Bool, withOtherNodes: Bool) {
        self.reply = reply
        self.wantsPort = wantsPort
        self.withOtherNodes = withOtherNodes
    }

    /// Stops the timer; the reply, unanswered, tells the requester no reply comes.
    func end() {
        timer?.invalidate()
        timer = nil
    }
}
