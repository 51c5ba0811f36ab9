import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

/// Where a name server listens, and the lock that says the address is served.
///
/// Starting at an address: take the lock file beside the socket (`names.sock.lock`,
/// `flock`, held for the server's life); a lock held by someone else means a live server,
/// which is never displaced. With the lock held, the server's port listens there
/// (`ReceivePort.listen(at:)`): a socket file nobody accepts on (a crashed server's) is
/// replaced, one that accepts (a live server that does not use the lock, a systemd socket)
/// is not displaced either. The port makes the socket file and removes it when it is
/// invalidated.
struct ServerListener {
    /// The path served, for messages.
    let address: String
    /// The held lock file; `nil` for a socket handed over by systemd.
    private let lock: FileDescriptor?

    /// The backlog asked of `listen` (the kernel caps it at `net.core.somaxconn`).
    static let backlog: CInt = 4096

    /// Makes `port` listen at `address`, replacing a stale socket file.
    /// - Throws: `serverAlreadyRunning` for a live server, `permissionDenied` for a directory
    ///   that is not private, `system` for other failures.
    static func listen(_ port: ReceivePort, at address: String, policy: NameServerPolicy) throws(NameServerError) -> ServerListener {
        guard address.utf8.count <= UnixSocket.maxPathBytes else {
            throw .system(operation: "bind \(address): the path is longer than \(UnixSocket.maxPathBytes) bytes", errno: ENAMETOOLONG)
        }
        try NameServerAddress.prepareDirectory(for: address)
        let lock = try takeLock(for: address)
        do throws(NameServerError) {
            // With the lock held, the port replaces a stale socket file (one nobody accepts
            // on: a crashed server's) and refuses a live one or a file that is no socket.
            do {
                try port.listen(at: .path(address), permissions: mode_t(policy.socketPermissions & 0o777), backlog: backlog)
            } catch {
                switch error {
                case .addressInUse: throw addressTaken(address)
                case .system(let failure): throw .system(failure)
                default: throw .transport(error)
                }
            }
            return ServerListener(address: address, lock: lock)
        } catch {
            releaseLock(lock, for: address)
            throw error
        }
    }

    /// Makes `port` listen on a listening socket made by someone else (systemd socket
    /// activation).
    /// - Throws: `system` or `transport` if it is not a listening Unix stream socket.
    static func listen(_ port: ReceivePort, onSocket descriptor: CInt) throws(NameServerError) -> ServerListener {
        do {
            try port.listen(onSocket: descriptor)
        } catch {
            if case .system(let failure) = error { throw .system(failure) }
            throw .transport(error)
        }
        return ServerListener(address: port.listeningAddress?.description ?? "descriptor \(descriptor)", lock: nil)
    }

    /// Lets the lock go, after the port (which removes its socket file) is invalidated:
    /// removes the lock file while still holding it.
    func close() {
        if let lock { Self.releaseLock(lock, for: address) }
    }

    // MARK: Steps

    /// Why the address is taken, with the lock held: a live server (one that does not use
    /// the lock, such as systemd's socket), or a file that is not a socket, which stays.
    private static func addressTaken(_ address: String) -> NameServerError {
        guard case .notASocket? = try? UnixSocket.probe(address) else { return .serverAlreadyRunning(address: address) }
        return .system(operation: "bind \(address) (not a socket: the file there is left alone)", errno: EEXIST)
    }

    private static func takeLock(for address: String) throws(NameServerError) -> FileDescriptor {
        let path = NameServerAddress.lockPath(for: address)
        // A lock file removed and made again between our open and our flock is not the
        // lock any more; try again with the new one.
        for _ in 0..<8 {
            let lock = try call("open \(path)") { () throws(Errno) in try FileSystem.openLockFile(path) }
            let locked: Bool
            do {
                locked = try FileSystem.tryLock(lock)
            } catch {
                try? lock.close()
                throw .system(operation: "flock \(path)", errno: error.rawValue)
            }
            guard locked else {
                try? lock.close()
                throw .serverAlreadyRunning(address: address)
            }
            if let held = try? FileSystem.status(lock), let named = try? FileSystem.status(path), held.isSameFile(as: named) {
                return lock
            }
            try? lock.close()
        }
        throw .system(operation: "flock \(path): the lock file keeps being replaced", errno: EAGAIN)
    }

    private static func releaseLock(_ lock: FileDescriptor, for address: String) {
        // Removed while still held, so no other server can lock this file after we let go
        // and believe it is the current lock.
        let path = NameServerAddress.lockPath(for: address)
        if let held = try? FileSystem.status(lock) { FileSystem.remove(path, ifStill: held) }
        try? lock.close()
    }

    /// Runs a System call, turning its `Errno` into `NameServerError.system`.
    private static func call<T>(_ operation: String, _ body: () throws(Errno) -> T) throws(NameServerError) -> T {
        do {
            return try body()
        } catch {
            throw .system(operation: operation, errno: error.rawValue)
        }
    }
}
