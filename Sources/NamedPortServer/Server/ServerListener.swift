import Glibc
import PermanentThread

/// The listening socket of a name server, and the lock that says the address is served.
///
/// Starting at an address: take the lock file beside the socket (`names.sock.lock`,
/// `flock`, held for the server's life); a lock held by someone else means a live server,
/// which is never displaced. With the lock held, a socket file already at the address is
/// probed with `connect`: refused means a crashed server left it (stale), so it is
/// removed and bound afresh; accepted means a live server that does not use the lock (a
/// systemd socket), which is not displaced either.
struct ServerListener {
    /// The listening socket (non-blocking, close-on-exec).
    let socket: FileDescriptor
    /// The path served, for messages.
    let address: String
    /// The held lock file; `nil` for a socket handed over by systemd.
    private let lock: FileDescriptor?
    /// The socket file this server made, removed when it stops (if it is still that file).
    private let boundFile: FileSystem.Status?

    /// The backlog asked of `listen` (the kernel caps it at `net.core.somaxconn`).
    static let backlog: CInt = 4096

    /// Binds and listens at `address`, replacing a stale socket file.
    /// - Throws: `addressInUse` for a live server, `permissionDenied` for a directory
    ///   that is not private, `system` for other failures.
    static func bind(at address: String, policy: NameServerPolicy) throws(NameServerError) -> ServerListener {
        guard address.utf8.count <= UnixSocket.maxPathBytes else {
            throw .system(operation: "bind \(address): the path is longer than \(UnixSocket.maxPathBytes) bytes", errno: ENAMETOOLONG)
        }
        try NameServerAddress.prepareDirectory(for: address)
        let lock = try takeLock(for: address)
        do throws(NameServerError) {
            try removeStaleSocket(at: address)
            let socket = try call("socket") { () throws(Errno) in try UnixSocket.make(nonBlocking: true) }
            do throws(NameServerError) {
                try call("bind \(address)") { () throws(Errno) in try UnixSocket.bind(socket, to: address) }
                try call("chmod \(address)") { () throws(Errno) in
                    try FileSystem.setPermissions(address, mode_t(policy.socketPermissions & 0o777))
                }
                let status = try call("lstat \(address)") { () throws(Errno) in try FileSystem.status(address) }
                try call("listen \(address)") { () throws(Errno) in try UnixSocket.listen(socket, backlog: backlog) }
                return ServerListener(socket: socket, address: address, lock: lock, boundFile: status)
            } catch {
                try? socket.close()
                throw error
            }
        } catch {
            releaseLock(lock, for: address)
            throw error
        }
    }

    /// Takes over a listening socket made by someone else (systemd socket activation).
    /// - Throws: `system(EINVAL)` if it is not a listening AF_UNIX stream socket.
    static func adopt(_ descriptor: CInt) throws(NameServerError) -> ServerListener {
        let socket = FileDescriptor(rawValue: descriptor)
        guard UnixSocket.isListeningStream(socket) else {
            throw .system(operation: "adopt descriptor \(descriptor): not a listening Unix stream socket", errno: EINVAL)
        }
        try call("fcntl \(descriptor)") { () throws(Errno) in
            try socket.setNonBlocking()
            try socket.setCloseOnExec()
        }
        let address = UnixSocket.boundPath(socket) ?? "descriptor \(descriptor)"
        return ServerListener(socket: socket, address: address, lock: nil, boundFile: nil)
    }

    /// Closes the socket; removes the socket file if it is still the one this server made,
    /// then the lock file, then lets the lock go.
    func close() {
        try? socket.close()
        if let boundFile { FileSystem.remove(address, ifStill: boundFile) }
        if let lock { Self.releaseLock(lock, for: address) }
    }

    // MARK: Steps

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
                throw .addressInUse(address: address)
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

    /// With the lock held: a socket file nobody accepts on is stale and goes; one that
    /// accepts is a live server (not using the lock); anything else is not ours to remove.
    private static func removeStaleSocket(at address: String) throws(NameServerError) {
        let state = try call("lstat and connect \(address)") { () throws(Errno) in try UnixSocket.probe(address) }
        switch state {
        case .free:
            return
        case .notASocket:
            throw .system(operation: "bind \(address): a file that is not a socket is there; not replacing it", errno: EEXIST)
        case .live:
            throw .addressInUse(address: address)
        case .stale:
            do {
                try FileSystem.remove(address)
            } catch where error == .noSuchFile {
                // Gone already.
            } catch {
                throw .system(operation: "unlink \(address)", errno: error.rawValue)
            }
        }
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
