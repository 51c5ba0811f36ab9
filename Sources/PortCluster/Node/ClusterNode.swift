import Glibc
import NamedPortServer
import PermanentThread
import PortKitLocks

/// A node's link to the cluster's directory: publishes this node's names on its lease,
/// renews the lease, and mirrors every node's names through a watch.
///
/// ```swift
/// let node = try ClusterNode(directory: "http://10.0.0.5:2379", node: "web-1", leaseTTL: 5) { event in
///     print(event)                                  // every event, on the node's thread
/// }
/// switch try node.publish("db", owner: ClusterOwner(node: "web-1", pid: getpid())) {
/// case .published: break
/// case .taken(let owner): print("db is", owner)
/// case .pending: break                              // the directory is down: published when back
/// }
/// node.owner(of: "cache")                           // any node's name, from the mirror
/// ```
///
/// The node works on a permanent thread of its own, whose loop drives every exchange
/// with the directory (`HTTPLoopDriver`: a descriptor source and a deadline timer per
/// call), so a directory that stops answering never holds up that loop: the mirror,
/// `owner(of:)`, `publish` and the events keep answering while a call waits for its
/// time-out. Its link is a state machine: down (retrying with backoff, 100 ms doubling to
/// 2 s), connecting, or up on a lease, renewed every third of its time to live. When the
/// link comes up, or a lease is found expired (the node was paused past its time to
/// live), the node takes a lease, reads every name (the mirror, diffed against what it
/// had, so watchers see only what changed), publishes its own names again (reporting any
/// another node took meanwhile, `ClusterEvent.lost`), deletes those withdrawn while it
/// was down, and watches from the revision after its read: no change is missed or seen
/// twice. Calls to the directory go out one at a time, in the order they were made.
public final class ClusterNode: NameDirectory, Sendable {
    /// The node's name.
    public let node: String
    /// The key prefix names live under, `portkit/names/` by default.
    public let prefix: String
    /// The lease's time to live, in seconds: how long the node's names outlive the node.
    public let leaseTTL: Int
    let etcd: EtcdClient
    let thread: PermanentThread
    let state = Locked(State())
    /// The ports to names on other nodes handed to this host's programs.
    let remotes = RemoteRelays()

    /// The requests to the directory, made from the node's loop, in order.
    let calls: HTTPLoopDriver

    /// The link to the directory.
    enum Link {
        /// Not connected: never yet (`nil`), or since this error.
        case down(DirectoryError?)
        /// The connect sequence is under way (its watch, once it is being opened).
        case connecting(watch: HTTPLoopDriver?)
        /// Connected, the node's names on this lease, the mirror kept by this watch.
        case up(lease: DirectoryLease, watch: HTTPLoopDriver)
    }

    /// Everything the node keeps (under `state`'s lock; changed on the node's thread).
    struct State {
        var link: Link = .down(nil)
        /// Which link (or attempt) is current: a call's completion from an earlier one is
        /// not acted on.
        var epoch = 0
        /// Whether `directoryDown` was reported since the link was last up.
        var reportedDown = false
        /// Whether a renewal is under way.
        var renewing = false
        /// The lease of the last link, tried again before a new one is granted.
        var lastLease: Int64?
        /// The names this node holds, or will publish once the directory is back.
        var mine: [String: ClusterOwner] = [:]
        /// Names withdrawn while their deletion could not be made: deleted from the lease
        /// when the link is next up.
        var withdrawnMeanwhile: Set<String> = []
        /// Every node's names, as the watch last said.
        var mirror: [String: ClusterOwner] = [:]
        var handlers: [@Sendable (ClusterEvent) -> Void] = []
        var retryDelay: Duration = ClusterNode.firstRetry
        var closed = false
        /// Where this node's gateway takes connections, published with every name a name
        /// server of the node publishes (empty: no gateway).
        var gatewayAddress = ""
    }

    /// The key prefix names live under unless a node is given another.
    public static let defaultPrefix = "portkit/names/"

    static let firstRetry: Duration = .milliseconds(100)
    static let lastRetry: Duration = .seconds(2)

    /// Starts a node named `node` on the directory at `directory` (an etcd endpoint,
    /// `http://HOST:PORT`, or `https://HOST:PORT` with a `directorySecurity`). It connects
    /// at once, and keeps trying while the directory is down: check `isConnected`, or wait
    /// for `ClusterEvent.directoryUp`.
    /// - Parameters:
    ///   - directory: the etcd endpoint.
    ///   - directorySecurity: for an `https://` endpoint, what secures the connections to
    ///     etcd (`ClusterTLS`: the authority that issued etcd's certificate, and a
    ///     certificate etcd accepts from a client).
    ///   - node: this node's name, unique in the cluster.
    ///   - prefix: the key prefix the cluster's names live under.
    ///   - leaseTTL: how long, in seconds, the node's names outlive it (at least 2).
    ///   - timeout: how long one directory call may take (on the node's loop, which goes
    ///     on with its other work meanwhile).
    ///   - onEvent: called on the node's thread with every event from the first
    ///     connection on (the first `directoryUp`, the names found then). A handler added
    ///     later with `onEvent(_:)` sees only the events after it is added.
    /// - Throws: `.invalidEndpoint` (an `https://` endpoint without a security, too).
    public init(
        directory: String, directorySecurity: (any StreamSecurity)? = nil, node: String, prefix: String = ClusterNode.defaultPrefix,
        leaseTTL: Int = 5, timeout: Duration = .seconds(2), onEvent: (@Sendable (ClusterEvent) -> Void)? = nil
    ) throws(DirectoryError) {
        etcd = try EtcdClient(endpoint: directory, security: directorySecurity, timeout: timeout)
        self.node = node
        self.prefix = prefix
        self.leaseTTL = max(leaseTTL, 2)
        if let onEvent { state.withLock { $0.handlers.append(onEvent) } }
        thread = PermanentThread(name: "portkit.cluster")
        do { try thread.run() } catch { throw .unavailable(endpoint: directory, reason: "the node's thread: \(error)") }
        guard let loop = thread.loop else { throw .unavailable(endpoint: directory, reason: "the node's thread has no loop") }
        calls = etcd.loopDriver(on: loop)
        try? thread.execute(label: "cluster connect") { [self] in connect() }
        let renew = LoopTimer(after: .seconds(self.leaseTTL) / 3, repeating: .seconds(self.leaseTTL) / 3) { [weak self] _ in
            self?.renew()
        }
        try? thread.execute(label: "cluster renew") { [thread] in try? thread.loop?.add(renew, forMode: .common) }
    }

    deinit { close() }

    /// Withdraws this node's names (revoking its lease) and stops its thread. The
    /// revocation is made from the caller's thread, waiting at most the node's time-out.
    public func close() {
        let wasOpen = state.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        guard wasOpen else { return }
        remotes.close()
        let lease = try? thread.sync(label: "cluster close") { () -> Int64? in
            let previous = replaceLink(with: .down(nil))
            calls.close()
            if case .up(let lease, _) = previous { return lease.id }
            return nil
        }
        if let lease = lease ?? nil { try? etcd.revoke(lease) }
        thread.stop()
    }

    // MARK: Names

    /// Publishes `name` as `owner`'s, cluster-wide (unique: one transaction on the key's
    /// creation), waiting at most `limit` for the directory's answer. While the directory
    /// is down, or the claim has not been answered within `limit`, the publication is
    /// `.pending`: the name is kept and published when the directory answers, and how that
    /// goes is a `ClusterEvent` (`.published`, or `.lost` when another node holds it).
    /// With `.zero`, or called on the node's own thread (from an event handler), it never
    /// waits: the form for a caller that must not block (a name server's thread).
    public func publish(_ name: String, owner: ClusterOwner, waitingUpTo limit: Duration = .seconds(2)) -> ClusterPublication {
        let closed = DirectoryError.unavailable(endpoint: etcd.endpoint, reason: "the node is closed")
        guard !state.withLock({ $0.closed }) else { return .pending(closed) }
        let reply = PublicationReply()
        // With no wait, the outcome is always an event, however soon it comes.
        let waits = limit > .zero
        do {
            try thread.execute(label: "cluster publish") { [self] in
                publishHere(name, owner: owner) { [self] outcome in
                    if !waits || !reply.answer(outcome) { reportOutcome(outcome, of: name) }
                }
            }
        } catch {
            return .pending(closed)
        }
        let notYet = ClusterPublication.pending(.unavailable(endpoint: etcd.endpoint, reason: "the claim is not answered yet"))
        guard waits else { return notYet }
        let waitUntil = thread.isCurrent ? ContinuousClock.now : .now + limit
        return reply.wait(until: waitUntil) ?? notYet
    }

    /// Withdraws `name`, if this node holds it. It returns at once: the deletion goes to
    /// the directory after every call made before it (while the directory is down, when
    /// it is back).
    public func withdraw(_ name: String) {
        try? thread.execute(label: "cluster withdraw") { [self] in withdrawHere(name) }
    }

    /// Who holds `name` in the cluster, as this node's mirror says (any node's name).
    public func owner(of name: String) -> ClusterOwner? { state.withLock { $0.mirror[name] } }

    /// Who holds `name` on another node, as this node's mirror says: what a name server
    /// on this node asks before it registers a name (`NameDirectory`).
    public func holder(of name: String) -> NameDirectoryHolder? {
        guard let owner = owner(of: name), owner.node != node else { return nil }
        return NameDirectoryHolder(node: owner.node, pid: owner.pid)
    }

    /// Every name in the cluster and its owner, as this node's mirror says.
    public var names: [String: ClusterOwner] { state.withLock { $0.mirror } }

    /// Whether the link to the directory is up.
    public var isConnected: Bool {
        state.withLock { if case .up = $0.link { true } else { false } }
    }

    /// Calls `handler` on the node's thread with every later event. The node connects as
    /// soon as it is made: to see the events of its first connection too, pass the
    /// handler to the initializer instead.
    public func onEvent(_ handler: @escaping @Sendable (ClusterEvent) -> Void) {
        state.withLock { $0.handlers.append(handler) }
    }

    // MARK: On the node's thread

    func report(_ event: ClusterEvent) {
        for handler in state.withLock({ $0.handlers }) { handler(event) }
    }

    /// Reports a publication's outcome no caller waits for (a pending one is reported
    /// when the link comes up).
    func reportOutcome(_ outcome: ClusterPublication, of name: String) {
        switch outcome {
        case .published: report(.published(name))
        case .taken(let other): report(.lost(name, to: other))
        case .pending: break
        }
    }
}
