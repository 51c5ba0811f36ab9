import Glibc
import PermanentThread
import PortKitSystem

/// A listening port's peer requirement: whom it admits among the processes that connect
/// to its address.
extension ReceivePort {
    /// Admits, among the processes that connect to the port's listening address, only
    /// those that meet `requirement`; `nil` admits every one (the default). Checked on the
    /// port's loop as each connection is accepted, before anything it sent is read: a
    /// refused peer's connection gets one `refused` frame (docs/WIRE.md) and is closed,
    /// so its requests fail with `PortError.refusedByPeer(reason:)`; the port's handler
    /// and peer observer never see it. `sameUser` means this process's user. Connections
    /// that reach the port otherwise (a send port that travelled, a lookup's) are not
    /// checked here: a name's requirement is the name server's to check.
    public func requirePeers(_ requirement: PeerRequirement?) {
        state.withLock { $0.peerRequirement = requirement }
    }

    /// Whom the port admits at its listening address (`requirePeers(_:)`).
    public var peerRequirement: PeerRequirement? { state.withLock { $0.peerRequirement } }

    /// Whether the port's requirement refuses the peer of `socket`, just accepted; if so
    /// the peer has been told why (a `refused` frame, written without waiting: it fits an
    /// empty socket's buffer) and the socket is closed.
    func refuses(_ socket: FileDescriptor) -> Bool {
        guard let requirement = peerRequirement else { return false }
        let reason: String
        if let ids = try? socket.peerCredentials() {
            let credentials = SenderCredentials(pid: ids.pid, uid: ids.uid, gid: ids.gid)
            guard let refusal = requirement.refusal(of: credentials, ownerUID: getuid(), process: {
                try? ProcessHandle.peer(of: socket, pid: ids.pid)
            }) else { return false }
            reason = refusal
        } else {
            reason = "its credentials cannot be read"
        }
        let text = Array("\(reason) (requirement: \(requirement))".utf8.prefix(1024))
        if let frame = try? WireCodec.encode(WireMessage(kind: .refused, id: 0, components: [.bytes(text)])) {
            _ = frame.withUnsafeBytes { try? socket.send($0) }
        }
        try? socket.close()
        return true
    }
}

extension Connection {
    /// A pidfd of the process at the other end of a socket connection (SO_PEERPIDFD, else
    /// `pidfd_open` of its SO_PEERCRED pid); `nil` for other media or when none is given.
    func peerProcess() -> ProcessHandle? {
        guard case .socket(let fd) = medium, let pid = remoteCredentials?.pid else { return nil }
        return try? usingDescriptors("SO_PEERPIDFD") { () throws(Errno) in try ProcessHandle.peer(of: fd, pid: pid) }
    }
}
