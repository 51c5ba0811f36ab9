import PermanentThread
import PortMessaging

// The blocking calls on names: register, unregister, look up, ask the owner, list and
// watch. Their async forms are in NameServerClient+Async.swift.
extension NameServerClient {
    /// Registers `port` under `name`: lookups of the name get a connection to `port`,
    /// whose handler receives what they send. The name is this connection's until
    /// `unregister`, `close`, or the end of the process.
    ///
    /// `port` should be scheduled on a loop (`ReceivePort.schedule`); brokered
    /// connections are adopted into it as they come. A port this client holds another name
    /// for is not sent again: the names share its one connection at the server.
    ///
    /// At a server that is a node of a cluster, `.cluster` scope publishes the name in the
    /// cluster's directory, unique across the nodes and looked up from any of them; `.host`
    /// (the default) keeps it on this host. A single host's server treats both alike.
    ///
    /// A name another connection holds is refused (`ifTaken: .fail`), or waited for as a
    /// standby (`.queue`: the registration's state is `queued`, then `registered` when the
    /// owner goes), or taken from an owner that registered it `replaceable` (`.replace`).
    /// A `requirement` makes the server refuse lookups from processes that do not meet it
    /// (`peerRequirementNotMet`); a predicate cannot travel to the server.
    /// - Parameters:
    ///   - name: the name.
    ///   - port: the port lookups of it connect to.
    ///   - scope: how far the name reaches.
    ///   - ifTaken: what to do when another connection holds the name.
    ///   - replaceable: whether a later `register(…, ifTaken: .replace)` may take the name
    ///     from this one (the registration then ends as `takenByAnother`).
    ///   - requirement: whom lookups of the name must come from; `nil`: anyone the server
    ///     admits.
    /// - Returns: the registration, whose `state` says whether the name is held or queued
    ///   (a reconnecting client registers it again after a server restart).
    /// - Throws: `nameTaken` (with the owner's pid; with `.replace`, an owner that did not
    ///   allow it), `nameTakenElsewhere` (a cluster name another node holds), `invalidName`,
    ///   `requirementCannotTravel`, `permissionDenied`, `limitExceeded`, `transport` (time-outs),
    ///   `connectionLost`, `serverUnavailable` (while reconnecting).
    @discardableResult
    public func blockingRegister(
        _ name: String, port: ReceivePort, scope: NameScope = .host, ifTaken: TakenNamePolicy = .fail, replaceable: Bool = false,
        requiring requirement: PeerRequirement? = nil
    ) throws(NameServerError) -> NameRegistration {
        let terms = RegisterTerms(ifTaken: ifTaken, replaceable: replaceable, requirement: requirement)
        let registration = try prepareRegistration(name, port, scope, terms)
        var queued = false
        do {
            try registerAttempts(registration).send { (call) throws(NameServerError) in
                queued = try blockingRequest(call).saysQueued
            }
        } catch {
            registration.notices?.invalidate()
            throw error
        }
        return recordRegistration(registration, queued: queued)
    }

    /// Releases a name this client registered. Connections already made to its port stay.
    /// While a reconnecting client is away from its server, the name is only forgotten
    /// (it is not registered again).
    /// - Throws: `notFound`, `notOwner` (another connection holds it), `invalidName`,
    ///   `transport` (time-outs), `connectionLost`.
    public func blockingUnregister(_ name: String) throws(NameServerError) {
        let call = try NameCall.unregister(name)
        if forgetWhileAway(name) { return }
        _ = try blockingRequest(call)
        released(name)
    }

    /// While a reconnecting client is away from its server, a name it releases is only
    /// forgotten; whether it was.
    func forgetWhileAway(_ name: String) -> Bool {
        let away = link.withLock { if case .reconnecting = $0 { true } else { false } }
        guard away, let registration = registrations.withLock({ $0.remove(name) }) else { return false }
        registration.move(to: .released)
        return true
    }

    /// Forgets the registration of a name the server released.
    func released(_ name: String) {
        registrations.withLock { $0.remove(name) }?.move(to: .released)
    }

    /// Looks `name` up and returns a send port already connected to its owner's port.
    /// A server out of descriptors answers `serverBusy`.
    ///
    /// With `wait`, a name not yet registered is waited for, up to that long, and the
    /// lookup returns as soon as someone registers it: no start-up race between a
    /// server and its clients. `.zero` (the default) answers at once; `nil` waits as long
    /// as it takes (up to the server's limit, a day), as a `nil` time-out does everywhere.
    /// - Throws: `notFound` (no wait), `waitTimedOut` (the wait passed), `invalidName`,
    ///   `permissionDenied`, `limitExceeded` (too many waiting lookups), `serverBusy`,
    ///   `connectionLost`.
    public func blockingLookup(_ name: String, waitingUpTo wait: Duration? = .zero) throws(NameServerError) -> SendPort {
        var fields = try lookup(.lookup, name, wait)
        _ = try fields.owner(named: name)
        return try fields.port()
    }

    /// Who holds `name`, without connecting to it; waits for the name like `lookup`. At a
    /// cluster's node, a name another node holds answers too, with its `NameOwner.node`
    /// (and, as in `list`, this server's uid: its process relays to the owner).
    /// - Throws: as `lookup`.
    public func blockingOwner(of name: String, waitingUpTo wait: Duration? = .zero) throws(NameServerError) -> NameOwner {
        var fields = try lookup(.owner, name, wait)
        return try fields.ownerWithNode(named: name)
    }

    private func lookup(_ operation: NameOperation, _ name: String, _ wait: Duration?) throws(NameServerError) -> NameFieldReader {
        try blockingRequest(try NameCall.lookup(operation, name, wait))
    }

    /// Every registered name with its owner, sorted by name. At a cluster's node, the
    /// names other nodes hold too (their `NameOwner.node` set), except one a client of this
    /// server holds as well, which shows as this host's.
    /// - Throws: `permissionDenied`, `transport` (time-outs), `connectionLost`.
    public func blockingList() throws(NameServerError) -> [NameOwner] {
        var fields = try blockingRequest(NameCall.list)
        return try fields.ownersHereAndElsewhere()
    }

    /// Watches the names starting with `prefix` (every name for the empty prefix): the
    /// current owners first, then every change. At a cluster's node, the names other nodes
    /// hold are watched too, with their `NameOwner.node` set (as `list` shows them).
    /// - Throws: `invalidName` (the prefix breaks the name rules), `limitExceeded`,
    ///   `permissionDenied`, `transport` (time-outs), `connectionLost`.
    public func blockingWatch(prefix: String = "") throws(NameServerError) -> NameWatch {
        try NameRules.validatePrefix(prefix)
        return try startWatch(prefix, exact: false)
    }

    /// Watches one name: its owner now (if any), then each time it appears or vanishes.
    /// - Throws: `invalidName`, `limitExceeded`, `permissionDenied`, `transport` (time-outs), `connectionLost`.
    public func blockingWatch(name: String) throws(NameServerError) -> NameWatch {
        try NameRules.validate(name)
        return try startWatch(name, exact: true)
    }

    private func startWatch(_ text: String, exact: Bool) throws(NameServerError) -> NameWatch {
        // The events arrive at a port of the watch's own, on this thread's loop; they queue
        // there from the first one on, behind the snapshot the reply carries.
        let (id, events) = try makeWatch(text, exact: exact, on: nil)
        do throws(NameServerError) {
            var fields = try blockingRequest(.watch, Self.watchFields(id, events), describing: "watching '\(text)'")
            return try watchStarted(events, owners: try fields.ownersHereAndElsewhere())
        } catch {
            events.end()
            throw error
        }
    }

    /// `startWatch` for a task: its port on `loop`.
    func startWatch(_ text: String, exact: Bool, on loop: ThreadLoop) async throws(NameServerError) -> NameWatch {
        let (id, events) = try makeWatch(text, exact: exact, on: loop)
        do throws(NameServerError) {
            let call = NameCall(operation: .watch, fields: Self.watchFields(id, events), what: "watching '\(text)'")
            var fields = try await request(call)
            return try watchStarted(events, owners: try fields.ownersHereAndElsewhere())
        } catch {
            events.end()
            throw error
        }
    }

    /// A new watch's id and receiving side, its port on `loop` (`nil`: this thread's).
    private func makeWatch(_ text: String, exact: Bool, on loop: ThreadLoop?) throws(NameServerError) -> (UInt64, WatchEvents) {
        (makeWatchID(), try WatchEvents(address: address, text: text, exact: exact, client: supervisor == nil ? nil : self, loop: loop))
    }

    /// The watch, once the server answered with the owners now.
    private func watchStarted(_ events: WatchEvents, owners: [NameOwner]) throws(NameServerError) -> NameWatch {
        events.resumed(generation: 0, owners: owners)
        if supervisor != nil {
            watches.withLock { watches in
                watches = watches.filter { $0.value.events != nil }
                watches[ObjectIdentifier(events)] = WatchReference(events: events)
            }
        }
        return NameWatch(prefix: events.text, exact: events.exact, initialOwners: owners, events: events)
    }

    /// A watch request's fields: its id, what it watches, its events' current port, and
    /// the flag that asks for other nodes' names too.
    static func watchFields(_ id: UInt64, _ events: WatchEvents) -> [MessageComponent] {
        [
            NameField.integer(id), NameField.string(events.text), NameField.integer(events.exact ? 1 : 0),
            .port(events.port.makeSendPort()), NameField.withOtherNodes,
        ]
    }

    /// A new watch id of this client.
    func makeWatchID() -> UInt64 {
        nextWatchID.withLock { id -> UInt64 in
            defer { id += 1 }
            return id
        }
    }
}
