import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    // MARK: Secured connections, the connecting side

    /// Secures a freshly connected TCP socket as the connecting side and makes it a
    /// connection: the handshake, then the first frame of the accepting port (its
    /// `limits` announcement, which every port writes first), both before `deadline`,
    /// polling the non-blocking socket between steps. Waiting for that frame is what
    /// tells a refusal apart from an acceptance: under TLS 1.3 the connecting side's
    /// handshake ends before the other side has judged its certificate, whose refusal
    /// then arrives as an alert instead of the frame.
    /// - Throws: `.handshakeFailed` (either side refused the other, the peer closed, or the
    ///   deadline passed first); the socket is closed.
    static func secureConnecting(
        _ socket: FileDescriptor, with security: any StreamSecurity, host: String,
        described: String, timeout: Duration, deadline: ContinuousClock.Instant
    ) throws(PortError) -> Connection {
        let stream: any SecuredStream
        do { stream = try security.secure(socket: socket.rawValue, as: .connecting(host: host)) } catch {
            try? socket.close()
            // A security names no address: the port does.
            if case .handshakeFailed(_, let reason) = error { throw .handshakeFailed(address: described, reason: reason) }
            throw error
        }
        let late = PortError.handshakeFailed(address: described, reason: "no handshake within \(timeout)")
        handshaking: while true {
            let events: CShort
            switch stream.handshake() {
            case .complete: break handshaking
            case .wantsReadable: events = CShort(POLLIN)
            case .wantsWritable: events = CShort(POLLOUT)
            case .failed(let reason):
                try? socket.close()
                throw .handshakeFailed(address: described, reason: reason)
            }
            guard ContinuousClock.now < deadline, (try? socket.poll(events, timeout: deadline - .now)) ?? 0 != 0 else {
                try? socket.close()
                throw late
            }
        }
        let connection = Connection(.secured(socket, stream))
        do throws(PortError) {
            try connection.awaitPeerAnnouncement(until: deadline, late: late, described: described)
        } catch {
            connection.close(.invalidPort)
            throw error
        }
        return connection
    }

    /// Reads this unbound connection until the peer's `limits` frame is in (delivering
    /// what else comes with it as an unbound connection does), or the deadline passes.
    private func awaitPeerAnnouncement(until deadline: ContinuousClock.Instant, late: PortError, described: String) throws(PortError) {
        while peerMaxMessageBytes.load(ordering: .relaxed) == 0 {
            let end = readAvailable(maxChunks: 4) { delivery in deliver(delivery, handler: nil) }
            if peerMaxMessageBytes.load(ordering: .relaxed) != 0 { return }
            if end == .closed {
                let reason = inbound.withLock { $0.streamFailure } ?? "the peer closed the connection instead of accepting it"
                throw .handshakeFailed(address: described, reason: reason)
            }
            let now = ContinuousClock.now
            guard now < deadline else { throw late }
            let ready = try usingDescriptors("poll") { () throws(Errno) -> CShort in
                try readFD.poll(CShort(POLLIN), timeout: deadline - now)
            }
            if ready == 0 { throw late }
        }
    }
}
