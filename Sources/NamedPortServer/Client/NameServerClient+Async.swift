import Glibc
import PermanentThread
import PortMessaging

/// The async forms, under the plain names (`lookup`, `register`, `list`, ...): each suspends
/// the task while the server answers, where its blocking twin (`blockingLookup`,
/// `blockingRegister`, `blockingList`, ...) blocks the thread. The two have different
/// names so that `try await names.lookup(…)` can never pick the blocking one.
///
/// No thread waits: each request is PortMessaging's async request, whose reply is handed
/// to the task by the loop that reads it. Cancelling the task ends the wait at once with
/// `NameServerError.transport(.cancelled)`; an answer that comes later is dropped (a lookup's port is
/// closed, so the owner sees the connection end).
extension NameServerClient {
    /// `blockingConnect(to:timeout:trustedServerUsers:reconnectingOn:)` for a task. The socket's
    /// connect does not wait (a Unix socket connects at once, or finds the backlog full and
    /// waits up to `timeout`), and the hello's answer is taken by the first call, as in the
    /// blocking form; with `reconnectingOn` it is waited for here, suspending the task. It
    /// neither starts a server nor waits for one to appear: the blocking form does both.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public static func connect(
        to address: String? = nil, timeout: Duration = .seconds(10), trustedServerUsers: Set<UInt32> = [],
        reconnectingOn supervisor: ThreadLoop? = nil
    ) async throws(NameServerError) -> NameServerClient {
        let address = NameServerAddress.resolve(address)
        let connection = supervisor == nil
            ? try connectOnce(address, timeout: timeout, trustedServerUsers, awaitingHello: false)
            : try await greetedConnection(address, timeout: timeout, trustedServerUsers)
        let client = NameServerClient(
            address: address, connection: connection, timeout: timeout, trustedServerUsers: trustedServerUsers,
            supervisor: supervisor)
        try client.supervise(connection)
        return client
    }

    /// Connects and says hello, suspending until the server answers it.
    private static func greetedConnection(
        _ address: String, timeout: Duration, _ trustedServerUsers: Set<UInt32>
    ) async throws(NameServerError) -> ServerConnection {
        let (server, peerPID) = try trustedPort(address, timeout: timeout, trustedServerUsers)
        do throws(NameServerError) {
            let hello = helloCall(address)
            let reply: Message
            do {
                reply = try await server.request(hello.message, sendTimeout: timeout, receiveTimeout: timeout)
            } catch {
                throw helloError(error, address: address, serverPID: peerPID)
            }
            let pid = try greetedPID(try okFields(of: reply, address: address))
            return ServerConnection(port: server, greeting: .greeted(pid: pid))
        } catch {
            server.invalidate()
            throw error
        }
    }

    /// `blockingRegister(_:port:scope:ifTaken:replaceable:requiring:)`, suspending while
    /// the server answers.
    /// - Parameters:
    ///   - name: the name.
    ///   - port: the port lookups of it connect to.
    ///   - scope: how far the name reaches.
    ///   - ifTaken: what to do when another connection holds the name.
    ///   - replaceable: whether a later `register(…, ifTaken: .replace)` may take it.
    ///   - requirement: whom lookups of the name must come from.
    /// - Throws: as the blocking form; `transport(.cancelled)` (the name may then be registered or not:
    ///   `unregister` it, or close the client, to be sure).
    @discardableResult
    public func register(
        _ name: String, port: ReceivePort, scope: NameScope = .host, ifTaken: TakenNamePolicy = .fail, replaceable: Bool = false,
        requiring requirement: PeerRequirement? = nil
    ) async throws(NameServerError) -> NameRegistration {
        let terms = RegisterTerms(ifTaken: ifTaken, replaceable: replaceable, requirement: requirement)
        let registration = try prepareRegistration(name, port, scope, terms)
        var queued = false
        do {
            try await registerAttempts(registration).send { (call) async throws(NameServerError) in
                queued = try await request(call).saysQueued
            }
        } catch {
            registration.notices?.invalidate()
            throw error
        }
        return recordRegistration(registration, queued: queued)
    }

    /// `blockingUnregister(_:)`, suspending while the server answers.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func unregister(_ name: String) async throws(NameServerError) {
        let call = try NameCall.unregister(name)
        if forgetWhileAway(name) { return }
        _ = try await request(call)
        released(name)
    }

    /// `blockingLookup(_:waitingUpTo:)`, suspending while the name is waited for: a send port
    /// connected to the owner's port.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func lookup(_ name: String, waitingUpTo wait: Duration? = .zero) async throws(NameServerError) -> SendPort {
        var fields = try await request(try NameCall.lookup(.lookup, name, wait))
        _ = try fields.owner(named: name)
        return try fields.port()
    }

    /// `blockingOwner(of:waitingUpTo:)`, suspending while the name is waited for.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func owner(of name: String, waitingUpTo wait: Duration? = .zero) async throws(NameServerError) -> NameOwner {
        var fields = try await request(try NameCall.lookup(.owner, name, wait))
        return try fields.ownerWithNode(named: name)
    }

    /// `blockingList()`, suspending while the server answers.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func list() async throws(NameServerError) -> [NameOwner] {
        var fields = try await request(NameCall.list)
        return try fields.ownersHereAndElsewhere()
    }

    /// `blockingWatch(prefix:)` for a task: `for try await event in try await names.watch(prefix: "db.")`.
    /// Its events come to a port on the process's shared reply loop, so no thread of the
    /// caller's needs to run a loop; iterating it suspends until the next event.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func watch(prefix: String = "") async throws(NameServerError) -> NameWatch {
        try NameRules.validatePrefix(prefix)
        return try await startWatch(prefix, exact: false, on: sharedLoop())
    }

    /// `blockingWatch(name:)` for a task, as `watch(prefix:)`.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func watch(name: String) async throws(NameServerError) -> NameWatch {
        try NameRules.validate(name)
        return try await startWatch(name, exact: true, on: sharedLoop())
    }

    // MARK: The request

    /// Sends `call` and suspends until the ok reply's fields (or the error its status stands for).
    func request(_ call: NameCall) async throws(NameServerError) -> NameFieldReader {
        try await Self.request(call, on: try currentServer(), address: address, timeout: timeout + call.wait)
    }

    /// The async `request(_:)` on a given connection.
    static func request(_ call: NameCall, on server: ServerConnection, address: String, timeout: Duration) async throws(NameServerError) -> NameFieldReader {
        if !server.greeting.isGreeted, let refusal = server.greeting.failure { throw refusal }
        let reply: Result<Message, PortError>
        do {
            reply = .success(try await server.port.request(call.message, sendTimeout: timeout, receiveTimeout: timeout))
        } catch {
            reply = .failure(error)
        }
        return try answered(reply, greeting: server.greeting, address: address, timeout: timeout, what: call.what)
    }

    private func sharedLoop() throws(NameServerError) -> ThreadLoop {
        do { return try SharedReplyLoop.loop() } catch {
            throw .transport(error)
        }
    }
}
