import Glibc
import PermanentThread
import Synchronization
import PortKitSystem
import PortKitLocks

extension WireLimits {
    /// The limits of a connection whose messages may carry `maxMessageBytes` of bytes
    /// components: the frame adds the header and a 5-byte header per component.
    static func transport(maxMessageBytes: Int = ReceivePort.defaultMaxMessageBytes) -> WireLimits {
        WireLimits(maxFrameBytes: maxMessageBytes + WireLayout.headerSize + WireLayout.componentHeaderSize * 1024)
    }

    /// The largest total of bytes components these limits let through.
    var maxMessageBytes: Int { maxFrameBytes - WireLayout.headerSize - WireLayout.componentHeaderSize * 1024 }
}

/// A framed two-way channel to one peer: a SOCK_STREAM Unix socket (descriptors travel
/// with SCM_RIGHTS) or a pair of pipes (bytes only).
///
/// Writing: any thread; one frame at a time (a frame is never interleaved with another),
/// waiting for room up to the send deadline. Reading: either a run loop (when the
/// connection is bound to a `ReceivePort`: frames go to its handler, replies to their
/// waiters), or, on an unbound connection, the thread waiting for a reply reads itself.
/// The connection owns its descriptors and closes them once.
///
/// One concept per file: the medium (`Connection+Medium`), writing frames
/// (`Connection+Writing`), reading and delivering them (`Connection+Reading`), requests
/// (`RequestTable`), waiting for a reply (`Connection+ReplyWait`), binding to a port and
/// watching for a hang-up (`Connection+Binding`), and the connection's life and its close
/// (`Connection+Life`).
final class Connection: Sendable {
    let medium: Medium
    let limits: WireLimits
    /// Who the peer is over pipes (the kernel names no sender there): the spawned child, or
    /// the parent that spawned this process. Over a socket each read brings its sender.
    let pipePeer: SenderCredentials?
    /// Who the kernel names as a socket's peer (SO_PEERCRED), when known without asking it:
    /// this process, for an end of a socket pair it made itself.
    let socketPeer: SenderCredentials?

    /// A frame is being written (the token that keeps frames whole).
    let writing = ConditionLock<Bool>(false)
    /// What loop threads wrote and the socket has not taken yet (`Connection+Outbox`), and
    /// how many bytes that is (read by every write, so an atomic).
    let outboxStorage = AtomicLazyReference<OutboxHolder>()
    /// Whether `outboxStorage` holds the queue (set once, after it is stored).
    let outboxMade = Atomic<Bool>(false)
    let queuedBytes = Atomic<Int>(0)
    /// The most bytes that queue (`ReceivePort.maxQueuedBytes` for a port's connections).
    let queueLimit = Atomic<Int>(ReceivePort.defaultMaxQueuedBytes)
    /// The users of the descriptors: every system call on them runs inside
    /// `withDescriptors`, and the last user out of a closed connection releases them.
    let gate = DescriptorGate()
    /// Bytes and descriptors read but not yet made into messages, and the buffer reads go
    /// into; held for the whole of a read, so reads on two threads cannot interleave.
    let inbound: Locked<Inbound>
    /// The requests in flight and their replies, who reads them (`ReplyReader`), and the
    /// connection's life (`withLife`): one lock, so that a connection makes one, and its close
    /// fails the requests in the same hold that ends its life.
    let replies = ConditionLock(RequestTable())
    /// Whether the life is open, readable without the lock (every write checks it); cleared
    /// in `close` under `replies`' lock, after the reason is recorded.
    let openFlag = Atomic<Bool>(true)
    /// Whether a read may wait for data (`readAvailable(waitingFirst:)`); decided once, by
    /// `prepareWaitingReads`, under `inbound`'s lock.
    let waitingReads = Atomic<WaitingReads>(.unknown)
    /// Whether the socket was made blocking (see `init`).
    let blockingSocket: Bool
    /// Whether a socket's receives bring their sender (SO_PASSCRED) yet: set before the
    /// connection's first read or write (`passCredentialsBeforeUse`), so that a connection
    /// never used (a looked-up port let go) makes no system call for it.
    let credentialsPassed: Atomic<Bool>

    /// The largest message the peer's port accepts, as it announced (a `limits` frame);
    /// 0 until then.
    let peerMaxMessageBytes = Atomic<Int>(0)

    /// Whether a read may wait for data on this connection.
    enum WaitingReads: UInt8, AtomicRepresentable {
        /// Not asked yet: no wait for a reply has needed it.
        case unknown
        /// The socket is blocking, with a receive timeout of `directWaitSlice` (every other
        /// read and write passes `MSG_DONTWAIT`).
        case ready
        /// Pipes, or a socket that refused: every wait polls first.
        case unavailable
    }

    /// What the reads have gathered but not yet delivered, and the buffer they read into.
    struct Inbound {
        var splitter: WireFrameSplitter
        /// A frame too large for the read buffer, being read into its own storage.
        var large: LargeFrame?
        var descriptors: [CInt] = []
        /// The sender of the bytes read last (a socket read never spans two senders).
        var sender: SenderCredentials?
        /// The emptied array of the last read that brought several frames, kept for its
        /// capacity (a stream of small messages brings hundreds per read).
        var spareDeliveries: [Delivery] = []
        /// The peer the messages come from, once a port took the connection.
        var peer: PortPeer?
        /// Whether `peer` was told of a frame begun and not finished.
        var partialNoted = false
        /// Why the secured stream broke, as it said (a read that failed).
        var streamFailure: String?
        /// A read lost descriptors (this process's table was full: `MSG_CTRUNC`): a frame
        /// begun by then may find fewer than it announces. Cleared once no frame is begun.
        var descriptorsDropped = false
    }

    /// A connection over `medium`, whose descriptors are non-blocking, or, with
    /// `blockingSocket`, a socket left blocking by its maker (every read and write but a
    /// waiting read passes `MSG_DONTWAIT`, so only waiting reads block on it): its first
    /// wait for a reply then sets no descriptor flag. `socketPeer` is what SO_PEERCRED
    /// would say, when the caller knows it (`remoteCredentials` then makes no system call).
    /// `passesCredentials`: the socket passes them already (accepted from a listener that
    /// does). `firstFrameLimits`, if given, hold the peer's first frame (`WireFrameSplitter`).
    init(
        _ medium: Medium, limits: WireLimits = .transport(), pipePeer: SenderCredentials? = nil, socketPeer: SenderCredentials? = nil,
        blockingSocket: Bool = false, passesCredentials: Bool = false, firstFrameLimits: WireLimits? = nil
    ) {
        self.medium = medium
        self.limits = limits
        self.pipePeer = pipePeer
        self.socketPeer = socketPeer
        self.blockingSocket = blockingSocket
        if case .socket = medium { credentialsPassed = Atomic(passesCredentials) } else { credentialsPassed = Atomic(true) }
        inbound = Locked(Inbound(splitter: WireFrameSplitter(limits: limits, firstFrameLimits: firstFrameLimits), sender: pipePeer))
    }

    /// Makes every receive on a socket name its sender (SO_PASSCRED), once, before the
    /// connection's first read or write (a socket pair's SO_PEERCRED would name the process
    /// that made it, a broker say). Before the first write is early enough: the kernel
    /// attaches the sender's credentials to what is written while either end passes them,
    /// and every PortKit end sets it before it writes (a listener's accepted ends inherit it),
    /// so nothing the peer wrote before this call lacks them.
    @inline(__always)
    func passCredentialsBeforeUse() {
        guard !credentialsPassed.load(ordering: .acquiring) else { return }
        passCredentialsNow()
    }

    /// The option is set before the flag (two threads may both set it, which does no harm):
    /// a thread that sees the flag knows the socket passes credentials.
    private func passCredentialsNow() {
        guard case .socket(let fd) = medium else { return }
        _ = withDescriptors { try? fd.passCredentials() }
        credentialsPassed.store(true, ordering: .releasing)
    }

    var isOpen: Bool { openFlag.load(ordering: .acquiring) }

    /// Runs `body` on the connection's life: open (and what it is bound to) or closed (and
    /// why, and what releases the descriptors); under `replies`' lock.
    @inline(__always)
    func withLife<R>(_ body: (inout Life) -> R) -> R {
        replies.withLock { body(&$0.life) }
    }

    /// Names the peer the connection's messages come from (`Message.peer`).
    func attach(_ peer: PortPeer) {
        inbound.withLock { $0.peer = peer }
    }

    /// The peer named by `attach`, if any.
    var peer: PortPeer? { inbound.withLock { $0.peer } }

    /// Who holds the other end: SO_PEERCRED of a socket (the process that made or
    /// accepted it), the spawned child or the parent over pipes; `nil` over TCP.
    var remoteCredentials: SenderCredentials? {
        switch medium {
        case .socket(let fd):
            if let socketPeer { return socketPeer }
            guard let ids = try? usingDescriptors("SO_PEERCRED", { () throws(Errno) in try fd.peerCredentials() }) else {
                return nil
            }
            return SenderCredentials(pid: ids.pid, uid: ids.uid, gid: ids.gid)
        case .pipes:
            return pipePeer
        case .tcp, .secured:
            return nil  // no SO_PEERCRED over TCP: the peer may be on another host
        }
    }

    /// `remoteCredentials` when they need no system call (`.some`, `nil` inside for TCP),
    /// or `nil` when only SO_PEERCRED can tell.
    var credentialsKnownWithoutAsking: SenderCredentials?? {
        if case .socket = medium, socketPeer == nil { return nil }
        return .some(remoteCredentials)
    }

    /// The peer's verified identity over a secured medium (`SecuredStream.peerIdentity`);
    /// `nil` for every other medium.
    var remoteIdentity: String? {
        if case .secured(_, let stream) = medium { stream.peerIdentity } else { nil }
    }

    /// Why the connection closed (`invalidPort` when it was closed without a reason).
    var closedError: PortError { replies.withLock { $0.failure } ?? .invalidPort }

    /// Runs `body`, which uses the descriptors, as a user of them; `nil` when the connection
    /// is closed (nothing was called). Never call it holding `inbound`'s or `replies`' lock:
    /// the last user out releases the descriptors, which takes both.
    @inline(__always)
    func withDescriptors<R>(_ body: () -> R) -> R? {
        guard gate.enter() else { return nil }
        defer { if gate.leave() { releaseDescriptors() } }
        return body()
    }

    /// Makes `call` on the descriptors as a user of them: its value, `closedError` when the
    /// connection is closed (nothing was called), or its errno as the failure of `operation`.
    func usingDescriptors<T>(_ operation: String, _ call: () throws(Errno) -> T) throws(PortError) -> T {
        switch withDescriptors({ Result { () throws(Errno) -> T in try call() } }) {
        case .none: throw closedError
        case .failure(let error)?: throw PortError(operation, error)
        case .success(let value)?: return value
        }
    }

    deinit {
        close(.invalidPort)
    }
}
