import PermanentThread

/// One client of the name server, as the server's thread sees it. Touched only on that
/// thread (it belongs to `NameServerCore`).
final class ServerConnection {
    /// The server's number for the connection.
    let id: UInt64
    /// The connected socket (non-blocking); closed when the connection is.
    let socket: FileDescriptor
    /// SO_PEERCRED of the client, read when it connected.
    let pid: Int32
    let uid: UInt32

    /// The loop source watching the socket; readable, plus writable while output waits.
    var source: DescriptorSource?
    var watchesWritable = false
    /// Requests are small: frames past `requestLimits` are refused at their header.
    var reader = FrameReader(limits: requestLimits, readSize: 4096)
    var output = FrameQueue()
    /// Whether output was queued since the last flush.
    var hasUnflushedOutput = false

    /// The names this connection holds.
    var names: Set<String> = []
    /// The connection's watches, by the id the client chose.
    var watches: [UInt64: WatchFilter] = [:]
    /// The server's ids of this connection's waiting lookups.
    var waitingLookups: Set<UInt64> = []

    /// The protocol version its hello asked for; `nil` until it says hello (then it is
    /// answered as a version 1 client).
    var version: UInt64?
    /// When the connection was accepted (its hello is due `helloTimeout` after).
    let accepted = ContinuousClock.now
    /// When the request now arriving in part began to (`nil`: none is in part).
    var partialSince: ContinuousClock.Instant?
    /// When the connection last completed a request.
    var lastActivity = ContinuousClock.now
    /// The timer that checks the connection's deadlines (`deadline(under:)`), if armed.
    var deadlineTimer: LoopTimer?

    /// Whether the connection holds anything: a name, a watch or a waiting lookup.
    var holdsSomething: Bool { !names.isEmpty || !watches.isEmpty || !waitingLookups.isEmpty }

    /// The earliest moment one of the policy's time-outs ends the connection, and which;
    /// `nil` when none applies now.
    func deadline(under policy: NameServerPolicy) -> (at: ContinuousClock.Instant, timeOut: TimeOut)? {
        var earliest: (at: ContinuousClock.Instant, timeOut: TimeOut)?
        func consider(_ date: ContinuousClock.Instant, _ timeOut: TimeOut) {
            if earliest.map({ date < $0.at }) ?? true { earliest = (date, timeOut) }
        }
        if version == nil { consider(accepted + policy.helloTimeout, .hello) }
        if let partialSince { consider(partialSince + policy.requestTimeout, .request) }
        // Before the hello, the hello time-out alone applies.
        if let idle = policy.idleTimeout, version != nil, !holdsSomething { consider(lastActivity + idle, .idle) }
        return earliest
    }

    /// The policy's time-outs, named so that no text is made unless one ends a connection.
    enum TimeOut {
        case hello, request, idle

        /// Why the connection ends, for its end reason.
        func reason(under policy: NameServerPolicy) -> String {
            switch self {
            case .hello: return "did not say hello within \(policy.helloTimeout)"
            case .request: return "did not finish a request within \(policy.requestTimeout)"
            case .idle: return "was idle for \(policy.idleTimeout ?? .zero)"
            }
        }
    }

    /// Set when the connection must go: it is closed, and its names released, at the end
    /// of the current loop callback.
    var isDoomed = false
    /// Why, for the log of a server that wants one.
    var doomReason: ConnectionEnd?

    init(id: UInt64, socket: FileDescriptor, pid: Int32, uid: UInt32) {
        self.id = id
        self.socket = socket
        self.pid = pid
        self.uid = uid
    }
}

/// Why the server ends a connection. A plain value, so the usual end (the client closed
/// or died) costs no string formatting on the path that tells watchers.
enum ConnectionEnd {
    /// The stream ended: closed by the client, failed, or malformed.
    case stream(StreamEnd)
    /// The server refused the client's behaviour or could not serve it.
    case refused(String)
}

/// A lookup waiting for its name to be registered.
final class WaitingLookup {
    let id: UInt64
    let name: String
    let connectionID: UInt64
    let sequence: UInt64
    /// `lookup` wants a connection brokered; `owner` only the owner's identity.
    let wantsPort: Bool
    var timer: LoopTimer?

    init(id: UInt64, name: String, connectionID: UInt64, sequence: UInt64, wantsPort: Bool) {
        self.id = id
        self.name = name
        self.connectionID = connectionID
        self.sequence = sequence
        self.wantsPort = wantsPort
    }
}

/// Who holds a name.
struct Registration {
    var owner: NameOwner
    var connectionID: UInt64
    /// The registration's offer channel (non-blocking; the server's to close), a
    /// connection into the owner's port: brokered connections go through it as the
    /// PortMessaging frame that makes the port adopt them on its own loop. `nil` for a
    /// version 1 client, whose offers go over its connection to the server.
    var offerChannel: FileDescriptor?
}

/// A watch, keyed for the server's table.
struct WatchKey: Hashable {
    var connectionID: UInt64
    var watchID: UInt64
}

/// What a watch matches: names starting with a prefix, or one name exactly.
struct WatchFilter {
    var text: String
    var exact: Bool

    /// Byte-wise, as names are compared.
    func matches(_ name: String) -> Bool {
        exact ? name.utf8.elementsEqual(text.utf8) : name.utf8.starts(with: text.utf8)
    }
}
