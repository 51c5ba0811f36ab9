import Glibc
import PermanentThread
import PortMessaging

/// Writing to clients, and ending connections at the end of a callback.
extension NameServerCore {
    // MARK: Output

    func reply(to connection: ServerConnection, _ sequence: UInt64, _ outcome: Result<Answer, NameServerError>) {
        let version = connection.version ?? oldestNameProtocolVersion
        switch outcome {
        case .success(let answer):
            // An older client takes one frame, as many fields as a frame holds; past that it
            // gets a clear refusal, not a hang-up.
            let parts = version >= partedRepliesVersion ? replyParts(answer.components) : [answer.components]
            guard parts.count > 1 || answer.components.count <= maxReplyPartComponents else {
                closeDescriptors(answer.descriptors)
                reply(to: connection, sequence, .failure(.limitExceeded(
                    what: "names in one reply to a client of protocol version \(version) (version 3 takes any number)",
                    limit: maxReplyPartComponents / 3)))
                return
            }
            // A reply is what the client asked for: it may take the queue past the slow-reader
            // limit once, but not while earlier output already does.
            guard connection.output.queuedBytes <= policy.maxQueuedBytesPerConnection else {
                closeDescriptors(answer.descriptors)
                doom(connection, .refused("does not read: \(connection.output.queuedBytes) bytes queued"))
                return
            }
            for part in parts.dropLast() {
                let message = WireMessage(kind: .reply, id: NameStatus.more.rawValue, sequence: sequence, components: part)
                send(message, descriptors: [], to: connection, checkingQueue: false)
            }
            let message = WireMessage(kind: .reply, id: NameStatus.ok.rawValue, sequence: sequence, components: parts[parts.count - 1])
            send(message, descriptors: answer.descriptors, to: connection, checkingQueue: false)
            if let then = answer.then {
                // What the request causes for others (an owner's offer, watchers' events)
                // waits until the requester's answer is written, not just queued.
                if connection.hasUnflushedOutput { flush(connection) }
                then()
            }
        case .failure(let error):
            statistics.refused(error, pid: connection.pid, uid: connection.uid)
            let (status, components) = NameReply.encode(error, version: version)
            send(WireMessage(kind: .reply, id: status.rawValue, sequence: sequence, components: components), descriptors: [], to: connection)
        }
    }

    func send(_ message: WireMessage, descriptors: [CInt], to connection: ServerConnection, checkingQueue: Bool = true) {
        guard !connection.isDoomed else {
            closeDescriptors(descriptors)
            return
        }
        let frame: OutgoingFrame
        do {
            frame = try message.frame(with: descriptors)
        } catch {
            closeDescriptors(descriptors)
            doom(connection, .refused("\(error)"))
            return
        }
        connection.output.append(frame)
        guard !checkingQueue || connection.output.queuedBytes <= policy.maxQueuedBytesPerConnection else {
            doom(connection, .refused("does not read: \(connection.output.queuedBytes) bytes queued"))
            return
        }
        if !connection.hasUnflushedOutput {
            connection.hasUnflushedOutput = true
            unflushed.append(connection)
        }
    }

    func flush(_ connection: ServerConnection) {
        connection.hasUnflushedOutput = false
        guard !connection.isDoomed else { return }
        switch connection.output.flush(to: connection.socket) {
        case .drained: watch(connection, writable: false)
        case .blocked: watch(connection, writable: true)
        case .failed(let error): doom(connection, .refused("write failed: \(error)"))
        }
    }

    // MARK: Ending connections

    func doom(_ connection: ServerConnection, _ reason: ConnectionEnd) {
        guard !connection.isDoomed else { return }
        connection.isDoomed = true
        connection.doomReason = reason
        doomed.append(connection)
        if case .refused(let why) = reason {
            statistics.refusedConnection(pid: connection.pid, uid: connection.uid, reason: why)
        } else {
            statistics.report(.connectionClosed(pid: connection.pid, uid: connection.uid))
        }
    }

    /// The end of every callback: release what must go (queuing `vanished` for its
    /// watchers), write what was queued, then tear the released connections down, until
    /// nothing is left. Watchers are written to before a dead connection's socket and
    /// source are closed: telling them is the latency that counts, closing costs more.
    func settle() {
        while !unflushed.isEmpty || !doomed.isEmpty {
            let toClose = doomed
            doomed = []
            for connection in toClose { release(connection) }
            let toFlush = unflushed
            unflushed = []
            for connection in toFlush { flush(connection) }
            for connection in toClose { tearDown(connection) }
        }
    }

    /// Forgets a doomed connection: its waiting lookups and watches are dropped, its names
    /// released in name order and their watchers told (queued, not yet written).
    func release(_ connection: ServerConnection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        for id in connection.waitingLookups { _ = removeWaiter(id) }
        for watchID in connection.watches.keys {
            watchers[WatchKey(connectionID: connection.id, watchID: watchID)] = nil
        }
        connection.watches = [:]
        for name in connection.names.sorted() {
            guard let holder = names.removeValue(forKey: name) else { continue }
            try? holder.offerChannel?.close()
            notifyWatchers(.vanished, holder.owner)
        }
        connection.names = []
    }

    /// Closes a released connection's source, socket and unsent descriptors.
    func tearDown(_ connection: ServerConnection) {
        connection.source?.invalidate()
        connection.source = nil
        connection.deadlineTimer?.invalidate()
        connection.deadlineTimer = nil
        connection.output.discard()
        connection.reader.discard()
        try? connection.socket.close()
    }
}
