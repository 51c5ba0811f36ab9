import Glibc
import PortMessaging

/// A connection to a name server: register ports under names, look names up, list and
/// watch them.
///
/// ```swift
/// let names = try NameServerClient.connect()           // the default address
/// let port = ReceivePort()
/// try port.schedule(on: loop) { request in Message(id: 0, components: [.data(request.bytes)], replyPort: nil) }
/// try names.register("db", port: port)                  // released when `names` closes or we die
///
/// let db = try names.lookup("db", waitingUpTo: .seconds(5))   // a SendPort connected to the owner
/// let reply = try db.sendRequest(request, sendTimeout: .seconds(1), receiveTimeout: .seconds(1))
/// ```
///
/// Names registered through a client belong to its connection: they are released when
/// the client is closed or deinitialised, or its process dies (the kernel closes the
/// socket, SIGKILL included). Every method may be called from any thread; the calls
/// block until the server answers, for at most the client's `timeout` (plus any wait
/// asked for). A client with no registered name reads its replies on the calling thread;
/// from the first registration on, one I/O thread shared by the process's clients reads.
public final class NameServerClient: Sendable {
    /// The address connected to.
    public var address: String { connection.address }
    /// The server's process id, as it said when the client connected.
    public let serverPID: Int32
    /// How long a call waits for the server's answer (beyond a wait it asked for).
    public let timeout: Duration
    let connection: ClientConnection
    /// The protocol version the server speaks (from 2 on it takes offer channels).
    private let serverVersion: UInt64

    private init(connection: ClientConnection, serverPID: Int32, serverVersion: UInt64, timeout: Duration) {
        self.connection = connection
        self.serverPID = serverPID
        self.serverVersion = serverVersion
        self.timeout = timeout
    }

    deinit {
        connection.close()
    }

    /// Connects to the name server at `address` (the default address if `nil`).
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
    /// - Throws: `serverUnavailable` (with the address and how to start a server),
    ///   `untrustedServer` (naming the address and the owner found), `permissionDenied`
    ///   (the server's policy refuses this user), `serverBusy` (the server is at its
    ///   connection limit or out of descriptors), `timedOut`, `protocolError` (not a
    ///   PortKit name server).
    public static func connect(
        to address: String? = nil, timeout: Duration = .seconds(10), startingServerIfNeeded: Bool = false,
        trustedServerUsers: Set<UInt32> = []
    ) throws(NameServerError) -> NameServerClient {
        let address = NameServerAddress.resolve(address)
        do {
            return try connectOnce(address, timeout: timeout, trustedServerUsers)
        } catch {
            guard case .serverUnavailable = error, startingServerIfNeeded else { throw error }
        }
        do {
            _ = try NameServer.embedded(at: address)
        } catch {
            // Another process started one at the same moment: use that one.
            guard case .addressInUse = error else { throw error }
        }
        return try connectOnce(address, timeout: timeout, trustedServerUsers)
    }

    private static func connectOnce(
        _ address: String, timeout: Duration, _ trustedServerUsers: Set<UInt32>
    ) throws(NameServerError) -> NameServerClient {
        let connection = try ClientConnection.open(address: address, timeout: timeout, trustedUsers: trustedServerUsers)
        do throws(NameServerError) {
            let deadline = ContinuousClock.now + timeout
            func sayHello(_ version: UInt64) throws(NameServerError) -> IncomingFrame {
                try connection.request(
                    .hello, [NameField.integer(version)], deadline: deadline, describing: "the name server at \(address) to say hello")
            }
            let hello: IncomingFrame
            do throws(NameServerError) {
                hello = try sayHello(nameProtocolVersion)
            } catch {
                // A server of version 2 refuses version 3 and keeps the connection: ask for 2.
                guard case .protocolError = error else { throw error }
                hello = try sayHello(2)
            }
            var fields = NameFieldReader(hello.message.components)
            let pid = try fields.pid()
            _ = try fields.uid()
            let version = try fields.integer()
            return NameServerClient(connection: connection, serverPID: pid, serverVersion: version, timeout: timeout)
        } catch {
            connection.close()
            if case .connectionLost = error {
                throw .serverUnavailable(address: address, reason: "the server closed the connection (too many clients?)")
            }
            throw error
        }
    }

    // MARK: Names

    /// Registers `port` under `name`: lookups of the name get a connection to `port`,
    /// whose handler receives what they send. The name is this connection's until
    /// `unregister`, `close`, or the end of the process.
    ///
    /// `port` should be scheduled on a loop (`ReceivePort.schedule`); brokered
    /// connections are adopted into it as they come.
    /// - Throws: `nameTaken` (with the owner's pid), `invalidName`, `permissionDenied`,
    ///   `limitExceeded`, `timedOut`, `connectionLost`.
    public func register(_ name: String, port: ReceivePort) throws(NameServerError) {
        try NameRules.validate(name)
        try connection.addRegistration(name, port)
        var fields = [NameField.string(name)]
        var descriptors: [CInt] = []
        if serverVersion >= 2, let channel = Self.offerChannel(into: port) {
            fields.append(.port(index: 0))
            descriptors.append(channel.rawValue)
        }
        do {
            _ = try connection.request(
                .register, fields, descriptors: descriptors, deadline: .now + timeout, describing: "registering '\(name)'")
        } catch {
            connection.removeRegistration(name, port)
            throw error
        }
    }

    /// A new connection into `port` whose other end, returned, goes to the server: the
    /// server sends the connections it brokers for the name through it, and the port adopts
    /// each on its own loop, with no thread of this client in between. `nil` when no
    /// socket pair can be made or the port refuses it (invalidated): the server then offers
    /// over this client's connection, as to a version 1 client.
    private static func offerChannel(into port: ReceivePort) -> FileDescriptor? {
        guard let (portEnd, serverEnd) = try? FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: true) else {
            return nil
        }
        do {
            try port.adoptConnection(portEnd)  // takes the end even when it refuses it
        } catch {
            try? serverEnd.close()
            return nil
        }
        return serverEnd
    }

    /// Releases a name this client registered. Connections already made to its port stay.
    /// - Throws: `notFound`, `notOwner` (another connection holds it), `invalidName`,
    ///   `timedOut`, `connectionLost`.
    public func unregister(_ name: String) throws(NameServerError) {
        try NameRules.validate(name)
        _ = try connection.request(
            .unregister, [NameField.string(name)], deadline: .now + timeout, describing: "releasing '\(name)'")
        connection.removeRegistrations(named: name)
    }

    /// Looks `name` up and returns a send port already connected to its owner's port.
    /// A server out of descriptors answers `serverBusy`.
    ///
    /// With `wait`, a name not yet registered is waited for, up to that long, and the
    /// lookup returns as soon as someone registers it: no start-up race between a
    /// server and its clients.
    /// - Throws: `notFound` (no wait), `timedOut` (the wait passed), `invalidName`,
    ///   `permissionDenied`, `limitExceeded` (too many waiting lookups), `serverBusy`,
    ///   `connectionLost`.
    public func lookup(_ name: String, waitingUpTo wait: Duration? = nil) throws(NameServerError) -> SendPort {
        let reply = try lookup(.lookup, name, wait)
        var fields = NameFieldReader(reply.message.components)
        do throws(NameServerError) {
            _ = try fields.owner(named: name)
            guard try fields.port() == 0, reply.descriptors.count == 1 else {
                throw .protocolError("a lookup reply without its connection")
            }
        } catch {
            closeDescriptors(reply.descriptors)
            throw error
        }
        return SendPort(adoptingSocket: FileDescriptor(rawValue: reply.descriptors[0]))
    }

    /// Who holds `name`, without connecting to it; waits for the name like `lookup`.
    /// - Throws: as `lookup`.
    public func owner(of name: String, waitingUpTo wait: Duration? = nil) throws(NameServerError) -> NameOwner {
        let reply = try lookup(.owner, name, wait)
        closeDescriptors(reply.descriptors)
        var fields = NameFieldReader(reply.message.components)
        return try fields.owner(named: name)
    }

    private func lookup(_ operation: NameOperation, _ name: String, _ wait: Duration?) throws(NameServerError) -> IncomingFrame {
        try NameRules.validate(name)
        let wait = max(wait ?? .zero, .zero)
        let milliseconds = UInt64(min((wait / .milliseconds(1)).rounded(.up), Double(maxLookupWaitMilliseconds)))
        return try connection.request(
            operation, [NameField.string(name), NameField.integer(milliseconds)],
            deadline: .now + wait + timeout, describing: "looking up '\(name)'")
    }

    /// Every registered name with its owner, sorted by name.
    /// - Throws: `permissionDenied`, `timedOut`, `connectionLost`.
    public func list() throws(NameServerError) -> [NameOwner] {
        let reply = try connection.request(.list, [], deadline: .now + timeout, describing: "listing names")
        closeDescriptors(reply.descriptors)
        var fields = NameFieldReader(reply.message.components)
        return try fields.owners()
    }

    /// Watches the names starting with `prefix` (every name for the empty prefix): the
    /// current owners first, then every change.
    /// - Throws: `invalidName` (the prefix breaks the name rules), `limitExceeded`,
    ///   `permissionDenied`, `timedOut`, `connectionLost`.
    public func watch(prefix: String = "") throws(NameServerError) -> NameWatch {
        try NameRules.validatePrefix(prefix)
        return try startWatch(prefix, exact: false)
    }

    /// Watches one name: its owner now (if any), then each time it appears or vanishes.
    /// - Throws: `invalidName`, `limitExceeded`, `permissionDenied`, `timedOut`, `connectionLost`.
    public func watch(name: String) throws(NameServerError) -> NameWatch {
        try NameRules.validate(name)
        return try startWatch(name, exact: true)
    }

    private func startWatch(_ text: String, exact: Bool) throws(NameServerError) -> NameWatch {
        let id = try connection.addWatch()
        let reply: IncomingFrame
        do {
            reply = try connection.request(
                .watch, [NameField.integer(id), NameField.string(text), NameField.integer(exact ? 1 : 0)],
                deadline: .now + timeout, describing: "watching '\(text)'")
        } catch {
            connection.removeWatch(id)
            throw error
        }
        closeDescriptors(reply.descriptors)
        var fields = NameFieldReader(reply.message.components)
        let owners: [NameOwner]
        do {
            owners = try fields.owners()
        } catch {
            connection.removeWatch(id)
            throw error
        }
        let connection = self.connection
        let timeout = self.timeout
        return NameWatch(prefix: text, exact: exact, initialOwners: owners, id: id, connection: connection, timeout: timeout)
    }

    // MARK: The connection

    /// Closes the connection: the server releases this client's names at once, its
    /// watches end, and later calls throw `connectionLost`. Connections already made to
    /// or from its ports stay. Safe to call more than once.
    public func close() {
        connection.close()
    }

    /// Whether the connection is still up as far as this client knows: false once closed,
    /// or once the server is seen gone (at once while a name is registered, otherwise at
    /// the next call or `NameWatch.next`).
    public var isConnected: Bool { connection.endError == nil }
}

extension NameFieldReader {
    /// pid and uid of an owner whose name the caller knows.
    mutating func owner(named name: String) throws(NameServerError) -> NameOwner {
        NameOwner(name: name, pid: try pid(), uid: try uid())
    }
}
