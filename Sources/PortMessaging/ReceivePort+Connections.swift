import Glibc
import PermanentThread
import PortKitSystem

/// Connections from other processes: adopting them, and what arrives on them.
extension ReceivePort {
    /// Takes ownership of a connected stream socket whose peer speaks the PortKit wire
    /// protocol; frames on it are delivered to this port's handler, and requests are
    /// answered on it.
    ///
    /// The socket may be blocking: every read and write on a socket connection passes
    /// `MSG_DONTWAIT` (a waiting read clears `O_NONBLOCK` itself), so no `fcntl` is needed.
    package func adoptConnection(_ socket: FileDescriptor) throws(PortError) {
        try adopt(Connection(.socket(socket), limits: limits))
    }

    /// Adopts this process's end of a socket pair it just made (`Connection.makeSocketPair`:
    /// non-blocking already, and its SO_PEERCRED names this process), with no system call
    /// to set or ask either.
    func adoptPairEnd(_ socket: FileDescriptor) throws(PortError) {
        try adopt(Connection(.socket(socket), limits: limits, socketPeer: .thisProcess))
    }

    /// Adopts a socket the port's own listener accepted (non-blocking already, and passing
    /// credentials if `passesCredentials`, inherited from the listener). Returns the
    /// connection when it may be read at once, here: the port is scheduled on this thread's
    /// loop and reading (the listener then reads it in its accepting pass, rather than
    /// after the loop's next wait, so a client that sends right after connecting is
    /// answered one wake-up sooner).
    func adoptAccepted(_ socket: FileDescriptor, passesCredentials: Bool) throws(PortError) -> Connection? {
        let connection = Connection(.socket(socket), limits: limits, passesCredentials: passesCredentials)
        return try adopt(connection) ? connection : nil
    }

    /// Adopts a connection (a socket or a pipe pair); whether it is bound to this thread's
    /// loop and being read.
    @discardableResult
    func adopt(_ connection: Connection) throws(PortError) -> Bool {
        let (schedule, paused) = try state.withLock { (state) throws(PortError) -> (Schedule?, Bool) in
            guard state.valid else { throw .invalidPort }
            state.connections[ObjectIdentifier(connection)] = connection
            return (state.schedule, state.readingPaused)
        }
        connection.queueLimit.store(maxQueuedBytes, ordering: .relaxed)
        // A connection made before this port took it (the one a check-in goes out on) reads
        // what this port accepts.
        if connection.limits != limits { connection.takeReadLimits(limits) }
        let peer = PortPeer(
            credentials: connection.credentialsKnownWithoutAsking, remoteAddress: connection.remoteAddress,
            remoteIdentity: connection.remoteIdentity, port: self, connection: ObjectIdentifier(connection))
        connection.attach(peer)
        connection.adopted(as: peer)
        // Once the peer is attached: a peer gone already leaves the connection open for its
        // loop to read what it wrote, and the end after it (`peerGoneOnWrite`).
        // A local peer that has read no announcement assumes the default limit: a port with
        // the default says nothing (one write fewer per connection, every brokered lookup's
        // included). Over TCP the announcement is also the sign the port took the connection.
        if maxMessageBytes != Self.defaultMaxMessageBytes || !connection.medium.isLocal {
            connection.announceLimit(maxMessageBytes)
        }
        if let schedule {
            // While the port's iteration holds back, the connection waits unread (in no mode).
            try connection.bind(to: self, loop: schedule.loop, modes: paused ? [] : schedule.modes, handler: schedule.handler)
            if paused { applyReadingOnLoop(schedule.loop) }  // resumed meanwhile: read it now
            report(.connected(peer))
            return !paused && schedule.loop.isCurrent
        }
        return false
    }

    /// What an adopted connection's close does (`Connection.adopted(as:)`): marks its peer
    /// gone and has the peer's port, if it still exists, forget the connection and report it.
    static func connectionClosed(_ connection: Connection, peer: PortPeer, reason: PortError) {
        let port = peer.port
        // While the descriptors are open: a peer handed out, or about to be in the event
        // below, keeps saying who it was.
        if port?.reportsPeerEvents == true { peer.noteHandedOut() }
        peer.settleCredentials(from: connection)
        peer.markDisconnected()
        guard let port else { return }
        _ = port.state.withLock { $0.connections.removeValue(forKey: ObjectIdentifier(connection)) }
        port.report(.disconnected(peer, reason))
    }

    /// A message from a connection, on the loop's thread, for the port's `handler` (which
    /// the connection keeps from its binding, so that the port itself need not be reached:
    /// only a check-in needs it).
    static func receive(
        _ message: Message, kind: WireKind, sequence: UInt64, from connection: Connection,
        handler: Handler, port: () -> ReceivePort?
    ) {
        switch kind {
        case .checkIn:
            port()?.checkedIn(
                message.replyPort ?? SendPort(connection: connection), id: message.id, sender: message.sender, handler: handler)
        case .request:
            handler.handle(message, answer: .connection(connection, sequence))
        case .message, .reply, .adoptConnection, .limits, .noReply, .refused:
            handler.handle(message, answer: nil)
        }
    }
}
