import Glibc
import PortMessaging

/// The name server's state and protocol, run on the server's thread only.
///
/// Single-threaded by design: every change (a register, a death, a watch starting)
/// happens in one loop callback, so a watch's snapshot and its subscription are taken
/// together with nothing in between, and a dead client's names are gone, and its
/// watchers told, before the loop sleeps again.
// Safety of @unchecked Sendable: every mutable property is read and written only on
// `loop`'s thread. The entry points are the loop's source and timer handlers and blocks
// performed on it (`start` adds a source, `shutdown` is performed); nothing else touches
// the state. The lets are immutable.
final class NameServerCore: @unchecked Sendable {
    // The members are internal, not private, only so that the core's other files
    // (accepting, output) reach them; nothing outside the core touches them.

    let loop: ThreadLoop
    let policy: NameServerPolicy
    let listener: ServerListener
    let serverPID = getpid()
    let serverUID = UInt32(getuid())

    var listenSource: DescriptorSource?
    var acceptPauseTimer: LoopTimer?
    var connections: [UInt64: ServerConnection] = [:]
    var nextConnectionID: UInt64 = 1
    var names: [String: Registration] = [:]
    var watchers: [WatchKey: WatchFilter] = [:]
    var waitersByName: [String: [UInt64]] = [:]
    var waiters: [UInt64: WaitingLookup] = [:]
    var nextWaiterID: UInt64 = 1
    /// Connections that queued output during the current callback.
    var unflushed: [ServerConnection] = []
    /// Connections to close at the end of the current callback.
    var doomed: [ServerConnection] = []
    var isShutDown = false
    /// Refusal counters and the event handler (NameServerStatus.swift).
    var statistics: ServerStatistics
    /// Closed to make room when accepting runs out of descriptors.
    var spare = SpareDescriptor()
    /// The most bytes one connection has had buffered for a request not yet whole.
    var peakBufferedBytes = 0

    init(loop: ThreadLoop, listener: ServerListener, policy: NameServerPolicy, events: NameServerEventHandler? = nil) {
        self.loop = loop
        self.listener = listener
        self.policy = policy
        self.statistics = ServerStatistics(events: events)
    }

    // MARK: Life

    /// Starts accepting; callable from any thread (adding a source is).
    func start() throws(NameServerError) {
        try watchListener()
    }

    func watchListener() throws(NameServerError) {
        let source = DescriptorSource(descriptor: listener.socket.rawValue, events: .readable) { [unowned self] _, _ in
            self.acceptAll()
        }
        do {
            try loop.add(source, forMode: .default)
        } catch {
            throw .system(operation: "watch the listening socket: \(error)", errno: EINVAL)
        }
        listenSource = source
    }

    /// Closes every connection and the listening socket. On the loop's thread.
    func shutdown() {
        guard !isShutDown else { return }
        isShutDown = true
        listenSource?.invalidate()
        listenSource = nil
        acceptPauseTimer?.invalidate()
        listener.close()
        spare.close()
        for waiter in waiters.values { waiter.timer?.invalidate() }
        waiters = [:]
        waitersByName = [:]
        watchers = [:]
        for registration in names.values { try? registration.offerChannel?.close() }
        names = [:]
        for connection in connections.values {
            connection.source?.invalidate()
            connection.deadlineTimer?.invalidate()
            connection.output.discard()
            connection.reader.discard()
            try? connection.socket.close()
        }
        connections = [:]
        unflushed = []
        doomed = []
    }

    /// Counts of what the server holds, for tests and diagnostics. On the loop's thread.
    var counts: NameServerCounts {
        NameServerCounts(
            connections: connections.count, names: names.count, waitingLookups: waiters.count, watches: watchers.count,
            bufferedRequestBytes: connections.values.reduce(0) { $0 + $1.reader.bufferedByteCount })
    }

    /// (Re)makes the connection's source: readable, and writable while output waits.
    func watch(_ connection: ServerConnection, writable: Bool) {
        if connection.source != nil && connection.watchesWritable == writable { return }
        connection.source?.invalidate()
        let id = connection.id
        let source = DescriptorSource(
            descriptor: connection.socket.rawValue, events: writable ? [.readable, .writable] : .readable
        ) { [unowned self] _, events in
            self.service(id, events)
        }
        connection.source = source
        connection.watchesWritable = writable
        do {
            try loop.add(source, forMode: .default)
        } catch {
            doom(connection, .refused("cannot watch its socket: \(error)"))
        }
    }

    // MARK: Serving a connection

    func service(_ id: UInt64, _ events: DescriptorEvents) {
        guard let connection = connections[id], !connection.isDoomed else { return }
        if events.contains(.writable) { flush(connection) }
        if !events.subtracting(.writable).isEmpty {
            let (frames, end) = connection.reader.read(from: connection.socket)
            if connection.reader.hasStrayDescriptors(perFrame: 1) {
                // Only a register carries one; kept, strays would pile up until the end.
                doom(connection, .refused("sent descriptors, which no request takes"))
            }
            for frame in frames {
                if connection.isDoomed {
                    closeDescriptors(frame.descriptors)
                } else {
                    handle(frame, from: connection)
                }
            }
            if let end { doom(connection, .stream(end)) }
            // After the requests, which may have said hello or taken a name.
            if !connection.isDoomed { noteProgress(connection, completed: !frames.isEmpty) }
        }
        settle()
    }

    func handle(_ frame: IncomingFrame, from connection: ServerConnection) {
        let message = frame.message
        // A register may carry one descriptor (its offer channel); no other request any.
        guard frame.descriptors.isEmpty
            || (frame.descriptors.count == 1 && message.kind == .request && message.id == NameOperation.register.rawValue)
        else {
            closeDescriptors(frame.descriptors)
            doom(connection, .refused("sent descriptors, which no request takes"))
            return
        }
        // What the request does not take over is closed once it is answered.
        var descriptors = frame.descriptors
        defer { closeDescriptors(descriptors) }
        guard message.kind == .request else {
            doom(connection, .refused("sent a frame of kind \(message.kind), only requests are taken"))
            return
        }
        guard let operation = NameOperation(rawValue: message.id) else {
            reply(to: connection, message.sequence, .failure(.protocolError("unknown operation \(message.id)")))
            return
        }
        var fields = NameFieldReader(message.components)
        do throws(NameServerError) {
            switch try perform(operation, &fields, &descriptors, connection, sequence: message.sequence) {
            case .reply(let answer, let then):
                reply(to: connection, message.sequence, .success(answer))
                then?()
            case .later:
                break
            }
        } catch {
            reply(to: connection, message.sequence, .failure(error))
        }
    }

    /// What a request comes to.
    enum RequestOutcome {
        /// Reply with these fields (and descriptors), then do `then` (tell watchers, answer
        /// waiting lookups) so that the requester hears of its success first.
        case reply(Answer, then: (() -> Void)? = nil)
        /// The reply comes later (a lookup waiting for its name).
        case later

        static func reply(_ components: [WireComponent], then: (() -> Void)? = nil) -> RequestOutcome {
            .reply(Answer(components: components, descriptors: []), then: then)
        }
    }

    /// The fields of an ok reply and the descriptors they refer to (the requester's end of
    /// a brokered connection), which the reply takes over.
    struct Answer {
        var components: [WireComponent]
        var descriptors: [CInt]
        /// Sent once the reply is queued: the owner's end of a brokered connection.
        var then: (() -> Void)? = nil
    }

    /// Carries out one request.
    /// `descriptors` came with the request; one it keeps is removed from the list.
    func perform(
        _ operation: NameOperation, _ fields: inout NameFieldReader, _ descriptors: inout [CInt],
        _ connection: ServerConnection, sequence: UInt64
    ) throws(NameServerError) -> RequestOutcome {
        if operation != .hello {
            guard policy.admits(connection.uid) else {
                throw .permissionDenied(reason: "uid \(connection.uid) may not use the name server of uid \(serverUID)")
            }
        }
        switch operation {
        case .hello:
            let version = try fields.integer()
            guard (oldestNameProtocolVersion...nameProtocolVersion).contains(version) else {
                throw .protocolError(
                    "protocol version \(version) asked, this server speaks \(oldestNameProtocolVersion) to \(nameProtocolVersion)")
            }
            connection.version = version
            return .reply([NameField.integer(serverPID), NameField.integer(serverUID), NameField.integer(nameProtocolVersion)])

        case .register:
            let name = try NameRules.decode(try fields.bytes()).get()
            if let holder = names[name] { throw .nameTaken(name: name, ownerPID: holder.owner.pid) }
            guard connection.names.count < policy.maxNamesPerConnection else {
                throw .limitExceeded(what: "names per connection", limit: policy.maxNamesPerConnection)
            }
            let channel = try offerChannel(&fields, &descriptors)
            let owner = NameOwner(name: name, pid: connection.pid, uid: connection.uid)
            names[name] = Registration(owner: owner, connectionID: connection.id, offerChannel: channel)
            connection.names.insert(name)
            return .reply([]) { [unowned self] in
                self.notifyWatchers(.appeared, owner)
                self.answerWaiters(for: name)
            }

        case .unregister:
            let name = try NameRules.decode(try fields.bytes()).get()
            guard let holder = names[name] else { throw .notFound(name: name) }
            guard holder.connectionID == connection.id else { throw .notOwner(name: name, ownerPID: holder.owner.pid) }
            names[name] = nil
            try? holder.offerChannel?.close()
            connection.names.remove(name)
            return .reply([]) { [unowned self] in self.notifyWatchers(.vanished, holder.owner) }

        case .lookup, .owner:
            let name = try NameRules.decode(try fields.bytes()).get()
            let wait = min(try fields.integer(), maxLookupWaitMilliseconds)
            let wantsPort = operation == .lookup
            if let holder = names[name] {
                return .reply(try answer(lookupOf: holder, wantsPort: wantsPort))
            }
            guard wait > 0 else { throw .notFound(name: name) }
            guard connection.waitingLookups.count < policy.maxWaitingLookupsPerConnection else {
                throw .limitExceeded(what: "waiting lookups per connection", limit: policy.maxWaitingLookupsPerConnection)
            }
            addWaiter(name: name, connection, sequence: sequence, wantsPort: wantsPort, milliseconds: wait)
            return .later

        case .list:
            return .reply(names.values.map(\.owner).sorted { $0.name < $1.name }.flatMap(NameField.owner))

        case .watch:
            let watchID = try fields.integer()
            let text = try fields.bytes()
            let exact = try fields.integer() != 0
            let filter = WatchFilter(text: try NameRules.decode(text, allowEmpty: !exact).get(), exact: exact)
            guard connection.watches[watchID] == nil else { throw .protocolError("watch id \(watchID) is in use") }
            guard connection.watches.count < policy.maxWatchesPerConnection else {
                throw .limitExceeded(what: "watches per connection", limit: policy.maxWatchesPerConnection)
            }
            // The snapshot and the subscription in the same callback: no change can fall
            // between them.
            connection.watches[watchID] = filter
            watchers[WatchKey(connectionID: connection.id, watchID: watchID)] = filter
            let current = names.values.map(\.owner).filter { filter.matches($0.name) }
            return .reply(current.sorted { $0.name < $1.name }.flatMap(NameField.owner))

        case .unwatch:
            let watchID = try fields.integer()
            connection.watches[watchID] = nil
            watchers[WatchKey(connectionID: connection.id, watchID: watchID)] = nil
            return .reply([])

        case .status:
            return .reply(statistics.fields(counts))
        }
    }

    // MARK: Lookups

    /// The reply of a lookup of a held name; for `lookup`, brokers a fresh connection: one
    /// end goes to the owner now, the other travels in the reply.
    func answer(lookupOf holder: Registration, wantsPort: Bool) throws(NameServerError) -> Answer {
        let identity = [NameField.integer(holder.owner.pid), NameField.integer(holder.owner.uid)]
        guard wantsPort else { return Answer(components: identity, descriptors: []) }
        guard let owner = connections[holder.connectionID] else { throw .notFound(name: holder.owner.name) }
        let ends: (FileDescriptor, FileDescriptor)
        do {
            ends = try FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: true)
        } catch where error.rawValue == EMFILE || error.rawValue == ENFILE {
            throw .serverBusy(address: listener.address, reason: "out of descriptors for a connection to '\(holder.owner.name)' (\(error))")
        } catch {
            throw .system(operation: "socketpair", errno: error.rawValue)
        }
        // The reply is written before the offer is even made: the looker's answer is on the
        // critical path, the owner's adoption is not (what the looker sends waits in the
        // socket until the owner reads it).
        let name = holder.owner.name
        return Answer(components: identity + [.port(index: 0)], descriptors: [ends.1.rawValue]) { [unowned self] in
            if let channel = holder.offerChannel {
                self.offer(ends.0, through: channel, name: name)
            } else {
                let offer = WireMessage(
                    kind: .message, id: NameNotice.connectionOffer.rawValue, components: [NameField.string(name), .port(index: 0)])
                self.send(offer, descriptors: [ends.0.rawValue], to: owner)
            }
        }
    }

    /// The offer channel a register carries (version 2), made non-blocking; `nil` if none.
    func offerChannel(_ fields: inout NameFieldReader, _ descriptors: inout [CInt]) throws(NameServerError) -> FileDescriptor? {
        guard !fields.atEnd else {
            guard descriptors.isEmpty else { throw .protocolError("a descriptor without its field") }
            return nil
        }
        guard try fields.port() == 0, descriptors.count == 1 else {
            throw .protocolError("an offer channel must be the register's one descriptor")
        }
        let channel = FileDescriptor(rawValue: descriptors[0])
        do {
            try channel.setNonBlocking()
        } catch {
            throw .system(operation: "fcntl an offer channel", errno: error.rawValue)
        }
        descriptors = []
        return channel
    }

    /// The frame that makes a PortMessaging port adopt the descriptor sent with it.
    private static let adoptFrame: [UInt8]? = try? WireCodec.encode(
        WireMessage(kind: .adoptConnection, id: 0, components: [.descriptor(index: 0)]))

    /// Sends the owner's end of a brokered connection through the owner's offer channel;
    /// its port adopts it on its own loop, with no other thread in between. Never waits:
    /// a channel that does not take the frame at once (its port gone, or so far behind that
    /// the socket is full) loses this connection (the looker sees its peer gone); one that
    /// took only part of it is broken, and the name's later offers go over the owner's
    /// connection to the server instead.
    func offer(_ end: FileDescriptor, through channel: FileDescriptor, name: String) {
        defer { try? end.close() }  // once sent, the kernel holds its own reference
        guard let frame = Self.adoptFrame else { return }
        let outcome = frame.withUnsafeBytes { raw in
            Result { () throws(Errno) in try channel.send(raw, descriptors: [end.rawValue]) }
        }
        guard case .success(let sent) = outcome, sent > 0, sent < frame.count else { return }
        channel.shutdown()
        if names[name]?.offerChannel?.rawValue == channel.rawValue {
            try? channel.close()
            names[name]?.offerChannel = nil
        }
    }

    func addWaiter(name: String, _ connection: ServerConnection, sequence: UInt64, wantsPort: Bool, milliseconds: UInt64) {
        let waiter = WaitingLookup(
            id: nextWaiterID, name: name, connectionID: connection.id, sequence: sequence, wantsPort: wantsPort)
        nextWaiterID += 1
        waiters[waiter.id] = waiter
        waitersByName[name, default: []].append(waiter.id)
        connection.waitingLookups.insert(waiter.id)
        let id = waiter.id
        let timer = LoopTimer(after: .milliseconds(Int64(milliseconds))) { [unowned self] _ in
            self.waiterTimedOut(id)
        }
        waiter.timer = timer
        try? loop.add(timer, forMode: .default)
    }

    func removeWaiter(_ id: UInt64) -> WaitingLookup? {
        guard let waiter = waiters.removeValue(forKey: id) else { return nil }
        waiter.timer?.invalidate()
        waitersByName[waiter.name]?.removeAll { $0 == id }
        if waitersByName[waiter.name]?.isEmpty == true { waitersByName[waiter.name] = nil }
        connections[waiter.connectionID]?.waitingLookups.remove(id)
        return waiter
    }

    func waiterTimedOut(_ id: UInt64) {
        guard let waiter = removeWaiter(id), let connection = connections[waiter.connectionID], !connection.isDoomed else {
            return
        }
        reply(to: connection, waiter.sequence, .failure(.timedOut(operation: "waiting for '\(waiter.name)'")))
        settle()
    }

    func answerWaiters(for name: String) {
        guard let ids = waitersByName[name] else { return }
        for id in ids {
            guard let holder = names[name] else { return }
            guard let waiter = removeWaiter(id), let connection = connections[waiter.connectionID], !connection.isDoomed else {
                continue
            }
            do throws(NameServerError) {
                reply(to: connection, waiter.sequence, .success(try answer(lookupOf: holder, wantsPort: waiter.wantsPort)))
            } catch {
                reply(to: connection, waiter.sequence, .failure(error))
            }
        }
    }

    // MARK: Watches

    func notifyWatchers(_ notice: NameNotice, _ owner: NameOwner) {
        statistics.report(notice == .appeared ? .nameRegistered(owner) : .nameReleased(owner))
        for (key, filter) in watchers where filter.matches(owner.name) {
            guard let connection = connections[key.connectionID], !connection.isDoomed else { continue }
            let event = WireMessage(
                kind: .message, id: notice.rawValue, components: [NameField.integer(key.watchID)] + NameField.owner(owner))
            send(event, descriptors: [], to: connection)
        }
    }
}
