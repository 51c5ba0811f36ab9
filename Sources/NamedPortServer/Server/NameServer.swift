import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem
import PortKitLocks

/// A name server for processes: a registry of port names on a thread of its own, served
/// by a `ReceivePort` listening at a Unix-domain socket path.
///
/// Start one inside any process with one call, or run the `portnamed` executable; clients
/// (`NameServerClient`, the `portname` command) find it at the same address either way.
///
/// ```swift
/// let server = try NameServer.start()           // the default address
/// // … later, or never: dropping the last reference stops it too
/// server.stop()
/// ```
///
/// A name belongs to the connection that registered it and is released the moment that
/// connection closes, which the kernel does when the owner's process dies, SIGKILL
/// included, or the moment the registered port dies. A lookup does not hand out an
/// address: the reply carries the owner's port, and PortMessaging makes a fresh
/// connection into it for the looking-up client, as when any `SendPort` travels.
///
/// By default only the server's own user may use it (SO_PEERCRED), the socket file is
/// `0600` and the default directory `0700`; `NameServerPolicy` changes that and the
/// per-connection limits.
public final class NameServer: Sendable {
    /// The socket path the server listens at (or a description of an adopted socket).
    public let address: String
    /// The policy it enforces.
    public let policy: NameServerPolicy
    private let thread: PermanentThread
    private let service: NameService
    private let listener: ServerListener
    private let stopped = Locked(false)

    /// Starts the server's thread, makes its port listen (`listen`), and serves.
    private init(
        policy: NameServerPolicy, events: NameServerEventHandler?, directory: (any NameDirectory)?,
        listen: (ReceivePort) throws(NameServerError) -> ServerListener
    ) throws(NameServerError) {
        // Requests are small: a larger one is refused at its header, and every client is
        // told the limit as it connects.
        let port = ReceivePort(maxMessageBytes: maxRequestBytes, maxQueuedBytes: policy.maxQueuedBytesPerConnection)
        let listener = try listen(port)
        let thread = PermanentThread(name: "portkit.names")
        let loop: ThreadLoop
        do {
            try thread.run()
            loop = thread.loop!  // set once `run()` returns
        } catch {
            port.invalidate()
            listener.close()
            throw .system(operation: "start the name server's thread: \(error)", errno: EAGAIN)
        }
        let service = NameService(
            loop: loop, port: port, address: listener.address, policy: policy, events: events, directory: directory)
        do {
            try service.start()
        } catch {
            port.invalidate()
            listener.close()
            thread.stop()
            throw error
        }
        self.address = listener.address
        self.policy = policy
        self.thread = thread
        self.service = service
        self.listener = listener
    }

    deinit {
        stop()
    }

    /// Starts a name server listening at `address` (the default address if `nil`).
    ///
    /// Makes the socket's directory (mode `0700`) if needed. A socket file left by a
    /// crashed server is replaced; a live server at the address is never displaced.
    /// Returns once the server accepts connections.
    /// - Parameters:
    ///   - address: the socket path; `nil` for `NameServerAddress.default`.
    ///   - policy: who may use the server and the limits.
    ///   - events: called on the server's thread with each `NameServerEvent`; `nil` for none.
    ///   - directory: for a cluster's node, who holds a name on another node: such a name
    ///     is refused with `nameTakenElsewhere`; `nil` (the default) for a single host.
    /// - Throws: `addressInUse` when a live server listens there, `permissionDenied` when
    ///   the default directory is not private to this user, `system` for other failures.
    public static func start(
        at address: String? = nil, policy: NameServerPolicy = NameServerPolicy(), events: NameServerEventHandler? = nil,
        directory: (any NameDirectory)? = nil
    ) throws(NameServerError) -> NameServer {
        let address = NameServerAddress.resolve(address)
        return try NameServer(policy: policy, events: events, directory: directory) { (port) throws(NameServerError) in
            try ServerListener.listen(port, at: address, policy: policy)
        }
    }

    /// Starts a name server on a listening socket made by someone else, such as systemd
    /// socket activation. The server owns the descriptor from then on; it does not remove
    /// the socket file when it stops (its maker does).
    /// - Parameters:
    ///   - descriptor: the listening socket.
    ///   - policy: who may use the server and the limits (its socket mode is its maker's).
    ///   - events: called on the server's thread with each `NameServerEvent`; `nil` for none.
    ///   - directory: for a cluster's node, who holds a name on another node, as in
    ///     `start(at:policy:events:directory:)`.
    /// - Throws: `system(EINVAL)` if `descriptor` is not a listening Unix stream socket.
    public static func start(
        adoptingListeningSocket descriptor: CInt, policy: NameServerPolicy = NameServerPolicy(),
        events: NameServerEventHandler? = nil, directory: (any NameDirectory)? = nil
    ) throws(NameServerError) -> NameServer {
        try NameServer(policy: policy, events: events, directory: directory) { (port) throws(NameServerError) in
            try ServerListener.listen(port, onSocket: descriptor)
        }
    }

    /// The process's own name server at `address` (the default address if `nil`): started
    /// on the first call, then the same one for the life of the process.
    ///
    /// This is the zero-set-up server: a program calls it (or
    /// `NameServerClient.blockingConnect(startingServerIfNeeded: true)`) and other processes of
    /// the user find it at the address, exactly as they would find `portnamed`.
    /// - Throws: as `start(at:policy:)`; `addressInUse` when another process serves it.
    public static func embedded(at address: String? = nil) throws(NameServerError) -> NameServer {
        let address = NameServerAddress.resolve(address)
        return try embeddedServers.withLock { (servers) throws(NameServerError) -> NameServer in
            if let server = servers[address], !server.isStopped { return server }
            let server = try start(at: address)
            servers[address] = server
            return server
        }
    }

    /// The listening socket systemd passed this process (socket activation), if it did:
    /// descriptor 3 when `LISTEN_PID` is this process and `LISTEN_FDS` is at least 1.
    /// Every passed descriptor is made close-on-exec (systemd hands them over without),
    /// and `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` are cleared, so children see
    /// neither.
    public static func socketFromActivation() -> CInt? {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pidText = getenv("LISTEN_PID"), let countText = getenv("LISTEN_FDS"),
              let pid = Int32(String(cString: pidText)), pid == getpid(),
              let count = Int(String(cString: countText)), count >= 1 else {
            return nil
        }
        for descriptor in 3..<(3 + CInt(clamping: min(count, 1024))) {
            try? FileDescriptor(rawValue: descriptor).setCloseOnExec()
        }
        return 3  // SD_LISTEN_FDS_START
    }

    /// Stops the server: closes every client connection (their names are gone with them)
    /// and the listening socket, removes the socket and lock files, and ends its thread.
    /// Returns once all that is done. Safe to call more than once, from any thread.
    public func stop() {
        let first = stopped.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        guard first else { return }
        let service = self.service
        do {
            try thread.execute(label: "stop the name server") { service.shutdown() }
        } catch {
            // The thread is gone already: nothing runs on it any more.
            service.port.invalidate()
        }
        // Runs the block above, then ends the thread and waits for it.
        thread.stop()
        listener.close()
    }

    /// How many connections, names, waiting lookups and watches the server holds now.
    /// - Throws: `connectionLost` once the server has stopped.
    public func counts() throws(NameServerError) -> NameServerCounts {
        try onServerThread { $0.counts }
    }

    /// Runs `body` with the service on the server's thread and returns what it returned.
    private func onServerThread<T: Sendable>(_ body: @escaping @Sendable (NameService) -> T) throws(NameServerError) -> T {
        let service = self.service
        let result = ConditionLock<T?>(nil)
        do {
            try thread.execute {
                let value = body(service)
                result.withLock { $0 = value }
                result.broadcast()
            }
        } catch {
            throw .connectionLost(address: address)
        }
        guard let value = result.wait(until: .now + .seconds(30), { $0 }) else {
            throw .waitTimedOut(operation: "asking the name server thread")
        }
        return value
    }

    /// Whether `stop()` has been called.
    public var isStopped: Bool { stopped.withLock { $0 } }
}

/// The servers `NameServer.embedded(at:)` started, kept for the life of the process.
private let embeddedServers = Locked<[String: NameServer]>([:])

/// What a name server holds at one moment (`NameServer.counts()`).
public struct NameServerCounts: Hashable, Sendable {
    /// Client connections.
    public var connections: Int
    /// Registered names.
    public var names: Int
    /// Lookups waiting for their name.
    public var waitingLookups: Int
    /// Open watches.
    public var watches: Int
    /// Bytes received for requests not yet whole, over every connection (each is refused
    /// past a few KiB, at its header).
    public var bufferedRequestBytes: Int = 0
}
