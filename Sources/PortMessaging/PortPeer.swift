import Glibc
import PermanentThread
import Synchronization
import PortKitSystem

/// One connection into a `ReceivePort` from another process, as the port's handler sees
/// it: who is at the other end, whether it is still there, and a way to end it.
///
/// A server keys what it holds for a client by its peer (`Message.peer`) and lets it go
/// when the peer disconnects (`ReceivePort.onPeerEvent(_:)`): the kernel closes a dead
/// process's sockets, SIGKILL included, so a peer's end is seen within one pass of the
/// port's loop. Peers are compared by identity; `id` is unique for the life of the process.
public final class PortPeer: Sendable, Hashable, CustomStringConvertible {
    /// A number unique to this peer among every peer of every port of this process.
    public let id: UInt64
    /// The process at the other end when the connection was made (SO_PEERCRED): for a
    /// connection a listening port accepted, the process that connected; for pipes, the
    /// child or the parent; for a connection that travelled as a port, the process that
    /// made it (a broker, say). What each message's sender is, `Message.sender` says.
    /// `nil` over TCP: the kernel names no process on another host (see `remoteAddress`).
    ///
    /// Asked of the kernel the first time someone wants it, not as the connection is made:
    /// a connection nobody asks about (a looked-up port's, say) makes no system call for it.
    public var credentials: SenderCredentials? {
        if let known = knownCredentials.load() { return known.credentials }
        return knownCredentials.storeIfNil(KnownCredentials(isConnected ? connection?.remoteCredentials : nil)).credentials
    }
    /// Where a peer connected over TCP connected from (`HOST:PORT`, `[HOST]:PORT` for
    /// IPv6), as the kernel names it; `nil` for every other connection.
    public let remoteAddress: String?
    /// Who the peer of a secured TCP connection (`TCPSecurity.secured(by:)`) proved to be,
    /// as its stream security verified it (for TLS, the common name of its certificate's
    /// subject); `nil` for every other connection.
    public let remoteIdentity: String?
    private let connected = Atomic<Bool>(true)
    /// The credentials once read (or known when the connection was made); `nil` until then.
    /// An atomic, not a lock: a peer is made per connection, and it is set once.
    private let knownCredentials = AtomicLazyReference<KnownCredentials>()
    /// Whether the peer has left its connection's hands (in a message, a peer event, a
    /// list of peers): then its credentials, if still unread, are read before its
    /// connection's descriptors close (`settleCredentials`), so it keeps saying who it was.
    private let handedOut = Atomic<Bool>(false)
    /// The port that holds the peer's connection, and the connection's identity there: the
    /// connection is found through the port, not by a weak reference, which would give every
    /// connection a side table (and no closure is made per peer).
    weak let port: ReceivePort?
    private let connectionID: ObjectIdentifier
    /// A message begun and not finished: since when (nanoseconds after `epoch`; 0: none),
    /// and how many bytes of it wait. Atomics, not a lock: a peer is made per connection.
    private let partialSince = Atomic<Int64>(0)
    private let partialBytes = Atomic<Int>(0)
    private static let epoch = ContinuousClock.now

    private static let nextID = Atomic<UInt64>(1)

    /// A peer's credentials once known (`nil` inside for a peer that has none).
    private final class KnownCredentials: Sendable {
        let credentials: SenderCredentials?
        init(_ credentials: SenderCredentials?) { self.credentials = credentials }
        /// The credentials of every TCP peer: none.
        static let none = KnownCredentials(nil)
    }

    /// A peer whose `credentials` are known already (`.some`), or asked of its connection
    /// when first wanted (`nil`).
    init(
        credentials: SenderCredentials??, remoteAddress: String? = nil, remoteIdentity: String? = nil,
        port: ReceivePort, connection: ObjectIdentifier
    ) {
        self.id = Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.remoteAddress = remoteAddress
        self.remoteIdentity = remoteIdentity
        self.port = port
        self.connectionID = connection
        if let credentials { _ = knownCredentials.storeIfNil(credentials.map(KnownCredentials.init) ?? .none) }
    }

    /// A pidfd of the peer's process, which the caller closes: what a peer requirement
    /// reads the peer's executable through. `nil` once disconnected, over TCP or pipes, or
    /// when the kernel gives none.
    package func processHandle() -> ProcessHandle? { isConnected ? connection?.peerProcess() : nil }

    /// The peer's connection while its port holds it.
    private var connection: Connection? { port?.state.withLock { $0.connections[connectionID] } }

    /// Whether the connection is still open.
    public var isConnected: Bool { connected.load(ordering: .acquiring) }

    /// Closes the connection: the peer sees its port die (`peerDied`), this port's
    /// `onPeerEvent` handler sees `.disconnected`. Replies already written stay written.
    /// Safe from any thread, and more than once.
    public func disconnect() {
        guard isConnected else { return }
        connection?.close(.invalidPort)
    }

    /// Since when part of a message from the peer waits for its rest, if one does.
    package var partialMessageSince: ContinuousClock.Instant? {
        let since = partialSince.load(ordering: .acquiring)
        return since == 0 ? nil : Self.epoch + .nanoseconds(since)
    }

    /// How many bytes of a message begun and not finished wait for its rest.
    package var partialMessageBytes: Int { partialBytes.load(ordering: .relaxed) }

    /// Records what a read left of a message begun and not finished (0: nothing). Called
    /// by the connection's reader only, one read at a time.
    func notePartialMessage(bytes: Int) {
        partialBytes.store(bytes, ordering: .relaxed)
        if bytes == 0 {
            partialSince.store(0, ordering: .releasing)
        } else if partialSince.load(ordering: .relaxed) == 0 {
            let elapsed = (ContinuousClock.now - Self.epoch).components
            partialSince.store(max(1, elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000), ordering: .releasing)
        }
    }

    /// Marks the peer gone (its connection closed).
    func markDisconnected() { connected.store(false, ordering: .releasing) }

    /// Notes that the peer leaves its connection's hands (`handedOut`). One load per
    /// message once noted.
    @inline(__always)
    func noteHandedOut() {
        if !handedOut.load(ordering: .relaxed) { handedOut.store(true, ordering: .relaxed) }
    }

    /// Reads the credentials now, while `connection`'s descriptors are open, if someone
    /// may ask for them later and they are still unread; called as the connection closes.
    func settleCredentials(from connection: Connection) {
        guard handedOut.load(ordering: .relaxed), knownCredentials.load() == nil else { return }
        _ = knownCredentials.storeIfNil(KnownCredentials(connection.remoteCredentials))
    }

    /// `peer #ID (pid=… uid=… gid=…)`, or `peer #ID (from HOST:PORT)` over TCP, or
    /// `peer #ID (NAME from HOST:PORT)` over secured TCP.
    public var description: String {
        let from = remoteAddress.map { address in " (" + (remoteIdentity.map { $0 + " " } ?? "") + "from \(address))" }
        return "peer #\(id)" + (credentials.map { " (\($0))" } ?? from ?? "")
    }

    /// Peers are equal when they are the same peer.
    public static func == (lhs: PortPeer, rhs: PortPeer) -> Bool { lhs === rhs }

    /// Hashes the peer's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}

/// A change among a port's peers, as `ReceivePort.onPeerEvent(_:)` reports it.
public enum PeerEvent: Sendable {
    /// A connection into the port was made (a peer connected to its listening address, a
    /// port of it travelled to another process, a child was spawned with it).
    case connected(PortPeer)
    /// The connection ended: the peer closed it or died (`peerDied`), this side ended it
    /// (`invalidPort`: `PortPeer.disconnect()`, the port's invalidation), or the stream
    /// broke (`malformed`, `messageTooLarge`). Every message the peer sent before its end
    /// reached the handler before this event.
    case disconnected(PortPeer, PortError)
}
