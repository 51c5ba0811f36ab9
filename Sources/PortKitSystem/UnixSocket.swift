import CPortKitSystem
import Glibc

// The calls of a socket bound to an address (bind, listen, accept, connect) and the
// file-system steps around it (stat, mkdir, chmod, unlink, flock): the System layer's, for
// PortMessaging's listening ports and the name server alike.

/// A path-bound Unix-domain stream socket: making, binding, listening, accepting, connecting.
package enum UnixSocket {
    /// The longest path a `sockaddr_un` holds (107 bytes and the terminating zero).
    package static let maxPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Makes an unbound AF_UNIX SOCK_STREAM socket, close-on-exec.
    ///
    /// The corresponding C function is `socket`.
    package static func make(nonBlocking: Bool) throws(Errno) -> FileDescriptor {
        let type = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | (nonBlocking ? CInt(SOCK_NONBLOCK.rawValue) : 0)
        return FileDescriptor(rawValue: try valueOrErrno { socket(AF_UNIX, type, 0) }.get())
    }

    /// Runs `body` with `path` as a `sockaddr_un`; `ENAMETOOLONG` if it does not fit. An
    /// abstract name (Linux: no file, gone with its socket) is a zero byte, then the name.
    private static func withAddress<R>(
        _ path: String, abstract: Bool, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R
    ) throws(Errno) -> R {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= maxPathBytes else { throw Errno(rawValue: ENAMETOOLONG) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            if abstract {
                raw[0] = 0
                UnsafeMutableRawBufferPointer(rebasing: raw[1...]).copyBytes(from: bytes)
            } else {
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
        }
        // A path's length counts its terminating zero; an abstract name's, its leading one.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// Sends `bytes` as one datagram to the socket at `path` (an abstract name when
    /// `abstract`), from a socket made for it: how a daemon tells its service manager its
    /// state (systemd's notify protocol). Never raises SIGPIPE.
    ///
    /// The corresponding C functions are `socket` (`SOCK_DGRAM`) and `sendto`.
    package static func sendDatagram(_ bytes: [UInt8], to path: String, abstract: Bool) throws(Errno) {
        let endpoint = FileDescriptor(rawValue: try valueOrErrno {
            socket(AF_UNIX, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        }.get())
        defer { try? endpoint.close() }
        try withAddress(path, abstract: abstract) { address, length in
            nothingOrErrno { sendto(endpoint.rawValue, bytes, bytes.count, CInt(MSG_NOSIGNAL), address, length) }
        }.get()
    }

    /// Binds `socket` to `path` (an abstract name when `abstract`).
    ///
    /// The corresponding C function is `bind`.
    package static func bind(_ socket: FileDescriptor, to path: String, abstract: Bool = false) throws(Errno) {
        let result = try withAddress(path, abstract: abstract) { address, length in
            nothingOrErrno { Glibc.bind(socket.rawValue, address, length) }
        }
        try result.get()
    }

    /// Connects `socket` to the socket bound at `path`.
    ///
    /// A blocking socket waits for room in a full backlog up to its `SO_SNDTIMEO`.
    /// The corresponding C function is `connect`.
    package static func connect(_ socket: FileDescriptor, to path: String, abstract: Bool = false) throws(Errno) {
        let result = try withAddress(path, abstract: abstract) { address, length in
            nothingOrErrno(.connect, on: socket.rawValue) { Glibc.connect(socket.rawValue, address, length) }
        }
        try result.get()
    }

    /// What is at a socket path, for a listener about to bind there.
    package enum PathState: Equatable {
        /// Nothing: the path is free.
        case free
        /// A socket file no one accepts on (its listener is gone): safe to remove.
        case stale
        /// A listener accepts there (or its backlog is full): never displaced.
        case live
        /// A file that is not a socket: never removed.
        case notASocket
    }

    /// Looks at `path` (`lstat`) and, if a socket file is there, probes it with a `connect`.
    ///
    /// The corresponding C functions are `lstat` and `connect`.
    package static func probe(_ path: String) throws(Errno) -> PathState {
        let status: FileSystem.Status
        do {
            status = try FileSystem.status(path)
        } catch where error == .noSuchFile {
            return .free
        }
        guard status.isSocket else { return .notASocket }
        let probe = try make(nonBlocking: true)
        defer { try? probe.close() }
        switch Result(catching: { () throws(Errno) in try connect(probe, to: path) }) {
        case .success: return .live
        case .failure(let error) where error == .connectionRefused: return .stale
        case .failure(let error) where error == .noSuchFile: return .free
        // A full backlog: somebody is listening.
        case .failure(let error) where error == .wouldBlock: return .live
        case .failure(let error): throw error
        }
    }

    /// Starts accepting connections, with a queue of `backlog` pending ones.
    ///
    /// The corresponding C function is `listen`.
    package static func listen(_ socket: FileDescriptor, backlog: CInt) throws(Errno) {
        try nothingOrErrno { Glibc.listen(socket.rawValue, backlog) }.get()
    }

    /// Accepts one pending connection (non-blocking, close-on-exec); `nil` when none waits.
    ///
    /// The corresponding C function is `accept4`.
    package static func accept(_ socket: FileDescriptor) throws(Errno) -> FileDescriptor? {
        let flags = CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue)
        switch valueOrErrno(.accept, on: socket.rawValue, { portkit_accept4(socket.rawValue, flags) }) {
        case .success(let raw): return FileDescriptor(rawValue: raw)
        case .failure(let error) where error == .wouldBlock: return nil
        // The peer gave up before we took it: nothing to accept after all.
        case .failure(let error) where error.rawValue == ECONNABORTED: return nil
        case .failure(let error): throw error
        }
    }

    /// The path a socket is bound to (`getsockname`), or `nil` if it has none.
    package static func boundPath(_ socket: FileDescriptor) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let status = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket.rawValue, $0, &length) }
        }
        guard status == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return path.isEmpty ? nil : path
    }

    /// Whether `socket` is a listening AF_UNIX stream socket (for a socket handed over by
    /// systemd).
    package static func isListeningStream(_ socket: FileDescriptor) -> Bool {
        func option(_ name: CInt) -> CInt? {
            var value: CInt = 0
            var length = socklen_t(MemoryLayout<CInt>.size)
            return getsockopt(socket.rawValue, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        return option(SO_DOMAIN) == AF_UNIX && option(SO_TYPE) == CInt(SOCK_STREAM.rawValue)
            && option(SO_ACCEPTCONN) == 1
    }

    /// Sets `SO_SNDTIMEO`, which also bounds how long a blocking `connect` waits.
    ///
    /// The corresponding C function is `setsockopt`.
    package static func setSendTimeout(_ socket: FileDescriptor, _ timeout: Duration) throws(Errno) {
        let (seconds, attoseconds) = max(timeout, .microseconds(1)).components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        if value.tv_sec == 0 && value.tv_usec == 0 { value.tv_usec = 1 }
        try nothingOrErrno {
            setsockopt(socket.rawValue, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }.get()
    }
}

/// File-system calls of the name server: its directory, socket file and lock file.
package enum FileSystem {
    /// What `lstat` says about a path.
    package struct Status {
        package var mode: mode_t
        package var owner: uid_t
        package var device: UInt
        package var inode: UInt

        package var isDirectory: Bool { mode & S_IFMT == S_IFDIR }
        package var isSocket: Bool { mode & S_IFMT == S_IFSOCK }
        /// The permission bits (`0o777`).
        package var permissions: mode_t { mode & 0o777 }

        /// Whether `other` is the same file (device and inode), not just the same name.
        package func isSameFile(as other: Status) -> Bool { device == other.device && inode == other.inode }
    }

    /// `lstat(path)`: the path itself, a symbolic link is not followed.
    ///
    /// The corresponding C function is `lstat`.
    package static func status(_ path: String) throws(Errno) -> Status {
        var info = stat()
        try nothingOrErrno { lstat(path, &info) }.get()
        return Status(mode: info.st_mode, owner: info.st_uid, device: UInt(info.st_dev), inode: UInt(info.st_ino))
    }

    /// `fstat(descriptor)`.
    ///
    /// The corresponding C function is `fstat`.
    package static func status(_ descriptor: FileDescriptor) throws(Errno) -> Status {
        var info = stat()
        try nothingOrErrno { fstat(descriptor.rawValue, &info) }.get()
        return Status(mode: info.st_mode, owner: info.st_uid, device: UInt(info.st_dev), inode: UInt(info.st_ino))
    }

    /// Makes a directory with `mode` (less the umask).
    ///
    /// The corresponding C function is `mkdir`.
    package static func makeDirectory(_ path: String, mode: mode_t) throws(Errno) {
        try nothingOrErrno { mkdir(path, mode) }.get()
    }

    /// Sets a path's permission bits.
    ///
    /// The corresponding C function is `chmod`.
    package static func setPermissions(_ path: String, _ mode: mode_t) throws(Errno) {
        try nothingOrErrno { chmod(path, mode) }.get()
    }

    /// Removes `path` if it still names the file `made` describes, never a file someone
    /// else put at the same name since.
    package static func remove(_ path: String, ifStill made: Status) {
        if let found = try? status(path), found.isSameFile(as: made) { try? remove(path) }
    }

    /// Removes a file name.
    ///
    /// The corresponding C function is `unlink`.
    package static func remove(_ path: String) throws(Errno) {
        try nothingOrErrno { unlink(path) }.get()
    }

    /// Opens (making it if needed, mode 0600) a lock file, close-on-exec.
    ///
    /// The corresponding C function is `open`.
    package static func openLockFile(_ path: String) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }.get())
    }

    /// Opens `/dev/null` for reading, close-on-exec (a spare descriptor).
    ///
    /// The corresponding C function is `open`.
    package static func openNull() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { open("/dev/null", O_RDONLY | O_CLOEXEC) }.get())
    }

    /// The process's soft limit on open descriptors (`RLIMIT_NOFILE`), what bounds every
    /// connection it holds; `Int.max` when unlimited or unknown.
    ///
    /// The corresponding C function is `getrlimit`.
    package static var descriptorLimit: Int {
        var value = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &value) == 0, value.rlim_cur != rlim_t.max else {
            return Int.max
        }
        return Int(clamping: value.rlim_cur)
    }

    /// Takes an exclusive `flock` without waiting; `false` if another holds it.
    ///
    /// The corresponding C function is `flock`.
    package static func tryLock(_ descriptor: FileDescriptor) throws(Errno) -> Bool {
        switch nothingOrErrno(.other, { flock(descriptor.rawValue, LOCK_EX | LOCK_NB) }) {
        case .success: return true
        case .failure(let error) where error == .wouldBlock: return false
        case .failure(let error): throw error
        }
    }
}
