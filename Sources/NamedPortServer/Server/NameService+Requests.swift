import Glibc
import PermanentThread
import PortMessaging

/// The name operations: one request message each, answered through its `PendingReply`.
extension NameService {
    /// A message at the server's port.
    func receive(_ message: Message, _ pending: PendingReply?) {
        guard !isShutDown else { return message.discardAttachments() }
        guard let pending else {
            // Clients only ask; a one-way message is no request.
            message.discardAttachments()
            if let peer = message.peer, let client = clients[peer.id] {
                disconnect(client, because: "sent a message that is not a request")
            }
            return
        }
        guard let peer = message.peer, let client = clients[peer.id] else {
            message.discardAttachments()
            pending.reply(NameReply.encode(.protocolError("requests come over a connection to the server's address")))
            return
        }
        if let refusal = client.refusal {
            message.discardAttachments()
            pending.reply(NameReply.encode(refusal))
            client.peer.disconnect()
            return
        }
        timeouts.heard(peer)
        guard let operation = NameOperation(rawValue: message.id) else {
            message.discardAttachments()
            return refuse(pending, .protocolError("unknown operation \(message.id)"), client)
        }
        guard operation == .hello || client.saidHello else {
            message.discardAttachments()
            return refuse(pending, .protocolError("say hello (protocol version \(nameProtocolVersion)) first"), client)
        }
        var fields = NameFieldReader(message.components)
        do throws(NameServerError) {
            try checkAttachments(message, operation)
            try perform(operation, &fields, client, pending)
        } catch {
            message.discardAttachments()
            refuse(pending, error, client)
        }
    }

    /// A register carries one port, a watch and a monitor one; no request carries anything else.
    private func checkAttachments(_ message: Message, _ operation: NameOperation) throws(NameServerError) {
        let ports = message.components.reduce(0) { count, component in if case .port = component { count + 1 } else { count } }
        let expected = operation == .register || operation == .watch || operation == .monitor ? 1 : 0
        // A register's notice port (a standby's, a replaceable owner's) is its second.
        let extra = operation == .register && ports == 2 ? 1 : 0
        let descriptors = message.components.contains { if case .descriptor = $0 { true } else { false } }
        guard ports == expected + extra, !descriptors, message.replyPort == nil else {
            throw .protocolError("a \(operation) request carries \(expected) port\(expected == 1 ? "" : "s") and nothing else")
        }
    }

    /// Answers `error`, counting it.
    func refuse(_ pending: PendingReply, _ error: NameServerError, _ client: Client) {
        statistics.refused(error, pid: client.pid, uid: client.uid)
        answer(pending, NameReply.encode(error), client)
    }

    /// Sends `reply` without waiting: a client that has left so much unread that its
    /// connection takes no more (`policy.maxQueuedBytesPerConnection`, at most the
    /// connection's own bound) is disconnected rather than waited for.
    func answer(_ pending: PendingReply, _ reply: Message, _ client: Client) {
        do {
            try pending.answer(reply, timeout: .zero)
        } catch .sendTimedOut {
            disconnect(client, because: "does not read its replies")
        } catch .messageTooLarge(let size, let limit) {
            refuse(pending, .limitExceeded(what: "bytes in one reply (\(size) asked)", limit: limit), client)
        } catch {
            // The client is gone: nothing to tell.
        }
    }

    private func perform(
        _ operation: NameOperation, _ fields: inout NameFieldReader, _ client: Client, _ pending: PendingReply
    ) throws(NameServerError) {
        let id = client.peer.id
        switch operation {
        case .hello:
            let version = try fields.integer()
            guard version == nameProtocolVersion else {
                throw .protocolError("protocol version \(version) asked, this server speaks \(nameProtocolVersion) only")
            }
            client.saidHello = true
            timeouts.greeted(client.peer)
            answer(pending, ok([NameField.integer(serverPID), NameField.integer(serverUID), NameField.integer(nameProtocolVersion)]), client)

        case .register, .registerSame:
            try register(operation, &fields, client, pending)

        case .unregister:
            let name = try NameRules.decode(try fields.bytes()).get()
            if table.holder(of: name)?.client != id, unregisterStandby(name, client, pending) { return }
            let (holder, channelFreed) = try table.unregister(name, client: id)
            if channelFreed { holder.channel?.invalidate() }
            answer(pending, ok([]), client)
            notifyWatchers(.vanished, holder.owner)
            handOver([holder])

        case .lookup, .owner:
            let name = try NameRules.decode(try fields.bytes()).get()
            let wait = min(try fields.integer(), maxLookupWaitMilliseconds)
            // `owner` from a client that reads a node field asks for other nodes' names too;
            // `lookup` always reaches them (its reply is a port, whichever node holds the name).
            let wantsPort = operation == .lookup
            let withOtherNodes = wantsPort ? true : try fields.asksForOtherNodes()
            let lookup = PendingLookup(reply: pending, wantsPort: wantsPort, withOtherNodes: withOtherNodes)
            if table.holder(of: name) != nil {
                return answerLookup(of: name, pending, wantsPort: lookup.wantsPort, client)
            }
            if lookup.withOtherNodes, let holder = directory?.holder(of: name) {
                return answerOtherNodes(name, holder, lookup, client)
            }
            if wantsPort, try activate(name, client, lookup, milliseconds: wait) { return }
            guard wait > 0 else { throw .notFound(name: name) }
            try addWaiter(for: name, client, lookup, milliseconds: wait)

        case .list:
            let withOtherNodes = try fields.asksForOtherNodes() && directory != nil
            answer(pending, ok(ownersFields(table.owners, withOtherNodes: withOtherNodes, matching: nil)), client)

        case .watch:
            let watchID = try fields.integer()
            let text = try fields.bytes()
            let exact = try fields.integer() != 0
            let watchPort = try fields.port()
            let withOtherNodes = try fields.asksForOtherNodes() && directory != nil
            let filter = WatchFilter(text: try NameRules.decode(text, allowEmpty: !exact).get(), exact: exact)
            let current: [NameOwner]
            do {
                // The snapshot and the subscription in the same callback: no change can fall
                // between them, and every event goes to the port after the reply is sent.
                current = try table.watch(watchID, client: id, filter: filter)
            } catch {
                watchPort.invalidate()
                throw error
            }
            let key = WatchKey(connectionID: id, watchID: watchID)
            watchPorts[key] = WatchTarget(port: watchPort, withOtherNodes: withOtherNodes)
            try? watchPort.onInvalidation(on: loop) { [unowned self] dead in
                if self.watchPorts[key]?.port === dead { self.endWatch(key) }
            }
            answer(pending, ok(ownersFields(current, withOtherNodes: withOtherNodes, matching: filter)), client)

        case .unwatch:
            let watchID = try fields.integer()
            endWatch(WatchKey(connectionID: id, watchID: watchID))
            answer(pending, ok([]), client)

        case .status:
            answer(pending, ok(statistics.fields(counts)), client)

        case .monitor:
            try startMonitor(&fields, client, pending)

        case .nameStatus:
            try answerNameStatus(&fields, client, pending)

        case .activatable:
            answer(pending, ok([NameField.string(activatableNames.joined(separator: "\n"))]), client)
        }
    }

    private func ok(_ fields: [MessageComponent]) -> Message {
        Message(id: NameStatus.ok.rawValue, components: fields)
    }

    /// `register` (the port comes with the request) or `registerSame` (the port of a name
    /// the client holds, whose connection the new name shares).
    private func register(
        _ operation: NameOperation, _ fields: inout NameFieldReader, _ client: Client, _ pending: PendingReply
    ) throws(NameServerError) {
        let id = client.peer.id
        let name = try NameRules.decode(try fields.bytes()).get()
        let brought = operation == .register
        let channel: SendPort
        var notices: SendPort?
        if brought {
            channel = try fields.port()
        } else {
            let held = try NameRules.decode(try fields.bytes()).get()
            guard let heldChannel = try table.channel(of: held, heldBy: id) else { throw .notFound(name: held) }
            guard heldChannel.isValid else {
                channelDied(heldChannel)
                throw .notFound(name: held)
            }
            channel = heldChannel
        }
        do throws(NameServerError) {
            // A trailing scope field: absent for `.host` (and from clients before scopes).
            let scope = fields.atEnd ? NameScope.host : NameScope(rawValue: try fields.integer())
            guard let scope else { throw .protocolError("unknown name scope") }
            let terms: RegisterTerms
            (terms, notices) = try readTerms(&fields)
            if scope == .cluster && (terms.ifTaken != .fail || terms.replaceable) {
                throw .protocolError("standbys and replacement are for names of this host")
            }
            if scope == .cluster, let holder = directory?.holder(of: name) {
                throw .nameTakenElsewhere(name: name, node: holder.node, ownerPID: holder.pid)
            }
            let owner = NameOwner(name: name, pid: client.pid, uid: client.uid)
            if terms.ifTaken != .fail, let holder = table.holder(of: name), holder.client != id {
                let standby = Holder(owner: owner, client: id, channel: channel, terms: terms, notices: notices)
                if try takeOver(standby, from: holder, pending, client) { return }
            }
            try table.register(owner, client: id, channel: channel, terms: terms, notices: notices)
            // A registered port that dies takes its names with it.
            if brought { try? channel.onInvalidation(on: loop) { [unowned self] dead in self.channelDied(dead) } }
            answer(pending, ok([]), client)
            notifyWatchers(.appeared, owner)
            if scope == .cluster, let directory {
                clusterScoped.insert(name)
                directory.nameRegistered(owner)
            }
            answerWaiters(for: name)
            activationRegistered(name)
        } catch {
            // Only a port this request brought is let go: a held name's stays with it.
            if brought { channel.invalidate() }
            notices?.invalidate()
            throw error
        }
    }

    // MARK: Lookups

    /// Answers a lookup of a held name: for `lookup`, the owner's port travels in the reply
    /// (PortMessaging makes a fresh connection into it for the looker).
    func answerLookup(of name: String, _ pending: PendingReply, wantsPort: Bool, _ client: Client) {
        guard let holder = table.holder(of: name), let channel = holder.channel else {
            return refuse(pending, .notFound(name: name), client)
        }
        if wantsPort, let reason = refusal(of: client, by: holder) {
            return refuse(pending, .peerRequirementNotMet(name: name, reason: reason), client)
        }
        // Room for the port too: appending it grows no array.
        var fields: [MessageComponent] = []
        fields.reserveCapacity(3)
        fields.append(NameField.integer(holder.owner.pid))
        fields.append(NameField.integer(holder.owner.uid))
        var tapped: MonitorTap?
        if wantsPort {
            guard channel.isValid else {
                channelDied(channel)
                return refuse(pending, .notFound(name: name), client)
            }
            // While a monitor watches the name, the looker is given a tapped connection.
            tapped = monitoring.isEmpty ? nil : tap(holder, channel, for: client)
            fields.append(.port(tapped?.entrance.makeSendPort() ?? channel))
        }
        defer { tapped?.closeUnlessTaken() }
        if !answerLookup(of: name, fields, through: channel, pending, client) {
            channelDied(channel)
            refuse(pending, .notFound(name: name), client)
        }
    }

    /// Answers a lookup or owner request for a name `holder` holds on another node: `owner`
    /// at once, with the node; `lookup` with a relaying port, from this loop once the
    /// directory has made it.
    func answerOtherNodes(_ name: String, _ holder: NameDirectoryHolder, _ lookup: PendingLookup, _ client: Client) {
        guard lookup.wantsPort else {
            let owner = otherNodeOwner(name, holder)
            let fields = [NameField.integer(owner.pid), NameField.integer(owner.uid), NameField.string(holder.node)]
            return answer(lookup.reply, ok(fields), client)
        }
        guard let directory else { return refuse(lookup.reply, .notFound(name: name), client) }
        let (clientID, pending) = (client.peer.id, lookup.reply)
        directory.remotePort(for: name) { [loop, weak self] port in
            do {
                try loop.perform { [weak self] in
                    guard let self, let client = self.clients[clientID] else { return }
                    self.answerRemoteLookup(of: name, holder: holder, port: port, pending, client)
                }
            } catch {
                _ = pending.refuse()
            }
        }
    }

    /// Answers a lookup of a name held on another node with `port`, relaying to its owner
    /// there (the pid is the owner's, on its node; the uid this server's, whose process
    /// relays); not found when there is none.
    private func answerRemoteLookup(
        of name: String, holder: NameDirectoryHolder, port: SendPort?, _ pending: PendingReply, _ client: Client
    ) {
        guard let port, port.isValid else { return refuse(pending, .notFound(name: name), client) }
        let fields = [NameField.integer(holder.pid), NameField.integer(serverUID), .port(port)]
        if !answerLookup(of: name, fields, through: port, pending, client) { refuse(pending, .notFound(name: name), client) }
    }

    /// Answers a lookup with `fields`, whose port (if any) PortMessaging brokers from
    /// `owner`: out of descriptors for that, `busy`; a looker that does not read its
    /// replies is disconnected; a looker gone is told nothing. False when `owner` turned
    /// out dead, and nothing was answered.
    private func answerLookup(
        of name: String, _ fields: [MessageComponent], through owner: SendPort, _ pending: PendingReply, _ client: Client
    ) -> Bool {
        do {
            try pending.answer(ok(fields), timeout: .zero)
        } catch .system(let failure) where failure.errno == EMFILE || failure.errno == ENFILE {
            refuse(pending, .serverBusy(address: address, reason: "out of descriptors for a connection to '\(name)' (\(failure.operation))"), client)
        } catch .peerDied where !owner.isValid {
            return false
        } catch .sendTimedOut {
            disconnect(client, because: "does not read its replies")
        } catch {
            // The looker is gone: nothing to tell.
        }
        return true
    }

    /// A registered port died: its names go, and their watchers are told.
    func channelDied(_ channel: SendPort) {
        dropStandbys(table.dropStandbys(channel: channel))
        let released = table.release(channel: channel)
        for holder in released { notifyWatchers(.vanished, holder.owner) }
        handOver(released)
    }

    func addWaiter(
        for name: String, _ client: Client, _ lookup: PendingLookup, milliseconds: UInt64
    ) throws(NameServerError) {
        let id = try table.addWaiter(for: name, client: client.peer.id, lookup)
        let timer = LoopTimer(after: .milliseconds(Int64(milliseconds))) { [unowned self] _ in
            guard let waiter = self.table.removeWaiter(id), let client = self.clients[waiter.client] else { return }
            waiter.waiting.end()
            self.refuse(waiter.waiting.reply, .waitTimedOut(operation: "waiting for '\(waiter.name)'"), client)
        }
        lookup.timer = timer
        try? loop.add(timer, forMode: .default)
    }

    /// Answers the lookups waiting for `name` that other nodes' names may answer, in the
    /// order they came: `holder` has taken the name on another node.
    func answerWaitersOnOtherNodes(for name: String, _ holder: NameDirectoryHolder) {
        for waiter in table.takeWaiters(for: name, where: { $0.withOtherNodes }) {
            waiter.waiting.end()
            guard let client = clients[waiter.client] else { continue }
            answerOtherNodes(name, holder, waiter.waiting, client)
        }
    }

    /// Answers every lookup waiting for `name`, in the order they came.
    func answerWaiters(for name: String) {
        for waiter in table.takeWaiters(for: name) {
            waiter.waiting.end()
            guard let client = clients[waiter.client] else { continue }
            answerLookup(of: name, waiter.waiting.reply, wantsPort: waiter.waiting.wantsPort, client)
        }
    }
}
