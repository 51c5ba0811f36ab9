import Glibc
import PermanentThread
import PortMessaging
import PortKitLocks

/// A connection to a name server: register ports under names, look names up, list and
/// watch them.
///
/// ```swift
/// let names = try NameServerClient.blockingConnect()   // the default address
/// let port = ReceivePort()
/// try port.schedule(on: loop) { request in Message(id: 0, components: [.data(request.bytes)], replyPort: nil) }
/// try names.blockingRegister("db", port: port)          // released when `names` closes or we die
///
/// let db = try names.blockingLookup("db", waitingUpTo: .seconds(5))   // a SendPort connected to the owner
/// let reply = try db.blockingRequest(request, sendTimeout: .seconds(1), receiveTimeout: .seconds(1))
/// ```
///
/// Each call has a form that suspends the task under the plain name (`connect`,
/// `register`, `lookup`, ...; see the async extension) and one that blocks the thread,
/// named `blocking…`.
///
/// Names registered through a client belong to its connection: they are released when
/// the client is closed or deinitialised, or its process dies (the kernel closes the
/// socket, SIGKILL included), or when the registered port is invalidated. Every method may
/// be called from any thread; the `blocking…` calls block until the server answers, for at most the
/// client's `timeout` (plus any wait asked for). The client is a `SendPort` connected to
/// the server's port: requests are PortMessaging requests, several may be in flight, and
/// nothing reads the connection but the callers waiting for their replies.
///
/// A client connected with `reconnectingOn: loop` survives a restart of its server: it
/// sees the connection close within one pass of `loop`, connects again with a bounded
/// backoff (and as soon as the address's directory changes), registers its names again
/// with the same ports and resumes its watches (docs/NAMES.md, "When the server
/// restarts"). Calls made meanwhile fail at once with `serverUnavailable`.
public final class NameServerClient: Sendable {
    /// The address connected to.
    public let address: String
    /// How long a call waits for the server's answer (beyond a wait it asked for).
    public let timeout: Duration
    /// Users besides this one and root whose server the client accepts, again on reconnect.
    let trustedServerUsers: Set<UInt32>
    /// The loop that watches the connection and reconnects; `nil`: the client does not
    /// reconnect.
    let supervisor: ThreadLoop?
    /// The connection to the server's port, or why there is none.
    let link: Locked<ServerLink>
    /// The id of the next watch request (the server keys a connection's watches by it).
    let nextWatchID = Locked<UInt64>(1)
    /// The names registered through this client, with their ports, kept alive while their
    /// names are held (a registered port that goes away takes its name with it).
    let registrations = Locked(RegisteredNames())
    /// The watches of a reconnecting client, resumed after a reconnection.
    let watches = Locked<[ObjectIdentifier: WatchReference]>([:])
    /// The reconnection's machinery, touched on the supervising loop's thread.
    let reconnection = Locked(Reconnection())

    init(
        address: String, connection: ServerConnection, timeout: Duration, trustedServerUsers: Set<UInt32>,
        supervisor: ThreadLoop?
    ) {
        self.address = address
        self.link = Locked(.connected(connection))
        self.timeout = timeout
        self.trustedServerUsers = trustedServerUsers
        self.supervisor = supervisor
    }

    deinit {
        let link = link.withLock { link -> ServerLink in
            defer { link = .closed(lastPID: link.lastKnownPID) }
            return link
        }
        if case .connected(let connection) = link { connection.port.invalidate() }
        endReconnection()
    }

    /// The server's process id, as it said in its hello: the current server's, or while
    /// reconnecting the last one's. Before any call has taken the hello's answer, reading
    /// it waits for that answer (at most `timeout`); a server that refused the hello is
    /// named by its socket's credentials.
    public var serverPID: Int32 {
        let (connection, last) = link.withLock { link -> (ServerConnection?, Int32) in
            if case .connected(let connection) = link { return (connection, 0) }
            return (nil, link.lastKnownPID)
        }
        guard let connection else { return last }
        return (try? connection.greeting.settle(timeout: timeout, address: address)) ?? connection.knownPID
    }

    /// The connection to the server's port, replaced on reconnection; `nil` while
    /// reconnecting or once closed.
    var server: SendPort? {
        link.withLock { link -> SendPort? in
            if case .connected(let connection) = link { return connection.port }
            return nil
        }
    }

    /// Connects to the name server at `address` (the default address if `nil`).
    ///
    /// Connecting checks the address and the server's user, connects and sends the hello,
    /// without waiting for its answer: the first call goes out right behind it, so that a
    /// new client's first lookup costs one round trip, not two. That call takes the hello's
    /// answer along with its own: a server that refuses the hello (its policy, its
    /// connection limit, another protocol version) has that call, and every later one,
    /// throw the refusal; it serves nothing before a good hello. A client that reconnects
    /// (`reconnectingOn`) waits for the answer here instead, so that a refusal is not taken
    /// for a server that went away.
    /// - Parameters:
    ///   - address: the server's socket path; `nil` for `NameServerAddress.default`
    ///     (`PORTKIT_NAME_SERVER`, else the per-user default).
    ///   - timeout: how long connecting, and later each call, may wait for the server.
    ///   - startingServerIfNeeded: when no server answers, start one in this process
    ///     (`NameServer.embedded(at:)`) and connect to it. It serves other processes too,
    ///     for as long as this process lives.
    ///   - trustedServerUsers: users besides this one and root whose server the client
    ///     accepts. Any other server is refused before a byte is sent to it, as is a
    ///     default-address directory that such a user owns or that others may write to.
    ///   - waitingForServer: how long to wait for a server to appear at the address when
    ///     none answers yet (one that is starting up, or being restarted): `.zero` (the
    ///     default) does not wait, `nil` waits as long as it takes. The wait watches the address's directory (inotify) and tries again when
    ///     something appears there, rather than polling.
    ///   - supervisor: a loop that watches the connection (it must run: the loop of
    ///     the registered ports, say) and, when the server goes away, connects again and
    ///     restores the client's names and watches (docs/NAMES.md, "When the server
    ///     restarts"); `nil` (the default) does not reconnect: a lost server is
    ///     `connectionLost` at the next call.
    /// - Throws: `serverUnavailable` (with the address and how to start a server),
    ///   `untrustedServer` (naming the address and the owner found), `permissionDenied`
    ///   (the socket refuses this user), `serverBusy` (the server closed at once, out of
    ///   descriptors), `transport(.sendTimedOut)` (its backlog stayed full), `transport` (the
    ///   `reconnectingOn` loop has ended). The first call (with `reconnectingOn`, `connect`) throws what the
    ///   hello's answer says:
    ///   `permissionDenied` (the server's policy refuses this user), `serverBusy` (at its
    ///   connection limit or out of descriptors), `protocolError` (not a PortKit name
    ///   server of this protocol version), `transport(.receiveTimedOut)` (no answer to the hello in time).
    public static func blockingConnect(
        to address: String? = nil, timeout: Duration = .seconds(10), startingServerIfNeeded: Bool = false,
        trustedServerUsers: Set<UInt32> = [], waitingForServer: Duration? = .zero, reconnectingOn supervisor: ThreadLoop? = nil
    ) throws(NameServerError) -> NameServerClient {
        let address = NameServerAddress.resolve(address)
        let connection = try connection(
            address, timeout: timeout, startingServerIfNeeded: startingServerIfNeeded,
            trustedServerUsers: trustedServerUsers, waitingForServer: waitingForServer, awaitingHello: supervisor != nil)
        let client = NameServerClient(
            address: address, connection: connection, timeout: timeout, trustedServerUsers: trustedServerUsers,
            supervisor: supervisor)
        try client.supervise(connection)
        return client
    }

    // MARK: Requests

    /// Sends one request and returns the ok reply's fields, or throws the error its status
    /// stands for.
    func blockingRequest(
        _ operation: NameOperation, _ fields: [MessageComponent], waiting wait: Duration = .zero, describing what: @autoclosure () -> String
    ) throws(NameServerError) -> NameFieldReader {
        try Self.blockingRequest(operation, fields, on: try currentServer(), address: address, timeout: timeout + wait, describing: what())
    }

    /// Sends `call`'s request, as the async `request(_:)` does, blocking the thread.
    func blockingRequest(_ call: NameCall) throws(NameServerError) -> NameFieldReader {
        try blockingRequest(call.operation, call.fields, waiting: call.wait, describing: call.what)
    }

    /// The connection requests go on now.
    /// - Throws: `serverUnavailable` while reconnecting, `connectionLost` once closed.
    func currentServer() throws(NameServerError) -> ServerConnection {
        try link.withLock { (link) throws(NameServerError) -> ServerConnection in
            switch link {
            case .connected(let connection): return connection
            case .reconnecting: throw .serverUnavailable(address: address, reason: "the server went away; reconnecting")
            case .closed: throw .connectionLost(address: address)
            }
        }
    }

    /// `request` on a given connection (the one a reconnection restores the client on).
    static func blockingRequest(
        _ operation: NameOperation, _ fields: [MessageComponent], on server: ServerConnection, address: String, timeout: Duration,
        describing what: @autoclosure () -> String
    ) throws(NameServerError) -> NameFieldReader {
        if !server.greeting.isGreeted, let refusal = server.greeting.failure { throw refusal }
        let reply = Result { () throws(PortError) in
            try server.port.blockingRequest(Message(id: operation.rawValue, components: fields), sendTimeout: timeout, receiveTimeout: timeout)
        }
        return try answered(reply, greeting: server.greeting, address: address, timeout: timeout, what: what())
    }

    /// The fields of an ok reply; the error any other reply stands for.
    static func okFields(of reply: Message, address: String) throws(NameServerError) -> NameFieldReader {
        guard reply.id == NameStatus.ok.rawValue else {
            reply.discardAttachments()
            throw NameReply.decode(status: reply.id, reply.components, address: address)
        }
        return NameFieldReader(reply.components)
    }

    /// What a failed request means for a name server client.
    static func requestError(_ error: PortError, address: String, what: String) -> NameServerError {
        switch error {
        case .peerDied, .invalidPort, .noReply: return .connectionLost(address: address)
        case .receiverOutOfDescriptors: return .serverBusy(address: address, reason: "out of descriptors for the request's port")
        case .malformed: return .protocolError("\(what): \(error)")
        default: return .transport(error)
        }
    }

    // MARK: The connection

    /// Closes the connection: the server releases this client's names at once, its
    /// watches end, its registrations are `released`, a reconnection stops, and later
    /// calls throw `connectionLost`. Connections already made to or from its ports stay.
    /// Safe to call more than once.
    public func close() {
        let link = link.withLock { link -> ServerLink in
            defer { link = .closed(lastPID: link.lastKnownPID) }
            return link
        }
        if case .connected(let connection) = link { connection.port.invalidate() }
        for registration in registrations.withLock({ $0.removeAll() }) {
            registration.move(to: .released)
        }
        for watch in watches.withLock({ watches in
            defer { watches = [:] }
            return watches.values.compactMap(\.events)
        }) {
            watch.fail(.connectionLost(address: address))
        }
        endReconnection()
    }

    /// Whether the connection is up as far as this client knows: false once closed,
    /// while reconnecting, or once the server is seen gone (at the next call, or within a
    /// pass of the supervising loop).
    public var isConnected: Bool { server?.isValid ?? false }
}

extension NameFieldReader {
    /// pid and uid of an owner whose name the caller knows.
    mutating func owner(named name: String) throws(NameServerError) -> NameOwner {
        NameOwner(name: name, pid: try pid(), uid: try uid())
    }

    /// An `owner` reply's owner: pid, uid, and for a name on another node, its node.
    mutating func ownerWithNode(named name: String) throws(NameServerError) -> NameOwner {
        var owner = try owner(named: name)
        if !atEnd { owner.node = try string() }
        return owner
    }
}
