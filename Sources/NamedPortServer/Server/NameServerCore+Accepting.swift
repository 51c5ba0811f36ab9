import Glibc
import PermanentThread
import PortMessaging

/// Taking connections in, turning away those the server cannot or may not serve, and
/// ending those that overstay the policy's time-outs.
extension NameServerCore {
    // MARK: Accepting

    func acceptAll() {
        for _ in 0..<64 {
            let accepted: FileDescriptor?
            do {
                accepted = try UnixSocket.accept(listener.socket)
            } catch where error.rawValue == EMFILE || error.rawValue == ENFILE {
                // Out of descriptors: the spare makes room to tell one client so at once.
                // Without it (or if it does not help) the listener stays readable, so
                // pause accepting briefly rather than spin.
                guard spare.isHeld, spare.spend({ turnAwayOne(reason: "out of descriptors (\(error))") }) else {
                    pauseAccepting()
                    break
                }
                continue
            } catch {
                pauseAccepting()
                break
            }
            guard let socket = accepted else { break }
            guard let credentials = try? socket.peerCredentials() else {
                try? socket.close()
                continue
            }
            let uid = UInt32(credentials.uid)
            // Refused users and connections past the limit are told why and closed at
            // once: they hold nothing here and count against nothing.
            guard policy.admits(uid) else {
                let reason = "uid \(uid) may not use the name server of uid \(serverUID)"
                ServerAdmission.turnAway(socket, .permissionDenied(reason: reason))
                statistics.refusedConnection(pid: credentials.pid, uid: uid, reason: reason)
                continue
            }
            guard connections.count < policy.maxConnections else {
                let reason = NameServerError.limitExceeded(what: "connections", limit: policy.maxConnections).description
                ServerAdmission.turnAway(socket, .serverBusy(address: listener.address, reason: reason))
                statistics.refusedConnection(pid: credentials.pid, uid: uid, reason: reason)
                continue
            }
            let connection = ServerConnection(id: nextConnectionID, socket: socket, pid: credentials.pid, uid: uid)
            nextConnectionID += 1
            connections[connection.id] = connection
            statistics.report(.connectionOpened(pid: connection.pid, uid: connection.uid))
            watch(connection, writable: false)
            armDeadline(connection)
        }
        settle()
    }

    /// Accepts one connection (with the room the spare made) and turns it away as busy;
    /// whether one was there.
    func turnAwayOne(reason: String) -> Bool {
        guard let socket = try? UnixSocket.accept(listener.socket) else { return false }
        let credentials = try? socket.peerCredentials()
        ServerAdmission.turnAway(socket, .serverBusy(address: listener.address, reason: reason))
        statistics.refusedConnection(pid: credentials?.pid ?? 0, uid: UInt32(credentials?.uid ?? 0), reason: reason)
        return true
    }

    /// Arms (or moves earlier) the timer that ends `connection` at its next deadline.
    func armDeadline(_ connection: ServerConnection) {
        guard let (date, _) = connection.deadline(under: policy) else { return }
        if let armed = connection.deadlineTimer, armed.isValid, armed.fireDate <= date { return }
        connection.deadlineTimer?.invalidate()
        let id = connection.id
        let timer = LoopTimer(fireAt: date) { [unowned self] _ in self.checkDeadline(id) }
        connection.deadlineTimer = timer
        try? loop.add(timer, forMode: .default)
    }

    /// A deadline timer fired: end the connection if its deadline has passed, else arm the
    /// timer for the next one (the deadlines move as the connection makes progress).
    func checkDeadline(_ id: UInt64) {
        guard let connection = connections[id], !connection.isDoomed else { return }
        connection.deadlineTimer = nil
        // What the client sent in time but this thread has not read yet (it was late, or
        // the loop fires timers before reading) counts: read it first.
        if let (date, _) = connection.deadline(under: policy), date <= .now {
            service(id, .readable)
            guard !connection.isDoomed, connections[id] != nil else { return }
        }
        if let (date, timeOut) = connection.deadline(under: policy), date <= .now {
            doom(connection, .refused(timeOut.reason(under: policy)))
            settle()
        } else {
            armDeadline(connection)
        }
    }

    func pauseAccepting() {
        listenSource?.invalidate()
        listenSource = nil
        let timer = LoopTimer(after: .milliseconds(50)) { [unowned self] _ in
            self.acceptPauseTimer = nil
            guard !self.isShutDown else { return }
            // A spare that could not be taken back (the process was full) is tried again.
            if !self.spare.isHeld { self.spare = SpareDescriptor() }
            try? self.watchListener()
        }
        acceptPauseTimer = timer
        try? loop.add(timer, forMode: .default)
    }

    /// Moves the connection's deadlines after a read: a request now arriving in part must
    /// be whole within `requestTimeout`, a completed one resets the idle time.
    func noteProgress(_ connection: ServerConnection, completed: Bool) {
        let buffered = connection.reader.bufferedByteCount
        peakBufferedBytes = max(peakBufferedBytes, buffered)
        let now = ContinuousClock.now
        if completed { connection.lastActivity = now }
        if buffered == 0 {
            connection.partialSince = nil
        } else if connection.partialSince == nil || completed {
            connection.partialSince = now
        }
        // The hello deadline is armed at accept; a partial request or an idle limit adds one.
        // Once none applies, the timer goes rather than fire for nothing.
        if buffered > 0 || policy.idleTimeout != nil {
            armDeadline(connection)
        } else if connection.version != nil, let timer = connection.deadlineTimer {
            timer.invalidate()
            connection.deadlineTimer = nil
        }
    }
}
