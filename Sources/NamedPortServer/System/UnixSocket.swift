import CPortKitSystem
import Glibc
import PermanentThread

// The socket, file and lock calls the name server needs and the System layer does not
// have yet (bind, listen, accept, connect, stat, mkdir, flock). They follow the System
// layer's shape (`FileDescriptor`, `Errno`, `valueOrErrno`) so they can move into
// `Sources/PermanentThread/System/Socket.swift` unchanged.

/// A path-bound Unix-domain stream socket: making, binding, listening, accepting, connecting.
enum UnixSocket {
    /// The longest path a `sockaddr_un` holds (107 bytes and the terminating zero).
    static let maxPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Makes an unbound AF_UNIX SOCK_STREAM socket, close-on-exec.
    ///
    /// The corresponding C function is `socket`.
    static func make(nonBlocking: Bool) throws(Errno) -> FileDescriptor {
        let type = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | (nonBlocking ? CInt(SOCK_NONBLOCK.rawValue) : 0)
        return FileDescriptor(rawValue: try valueOrErrno { socket(AF_UNIX, type, 0) }.get())
    }

    /// Runs `body` with `path` as a `sockaddr_un`; `ENAMETOOLONG` if it does not fit.
    private static func withAddress<R>(
        _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R
    ) throws(Errno) -> R {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= maxPathBytes else { throw Errno(rawValue: ENAMETOOLONG) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// Binds `socket` to `path`.
    ///
    /// The corresponding C function is `bind`.
    static func bind(_ socket: FileDescriptor, to path: String) throws(Errno) {
        let result = try withAddress(path) { address, length in
            nothingOrErrno { Glibc.bind(socket.rawValue, address, length) }
        }
        try result.get()
    }

    /// Connects `socket` to the socket bound at `path`.
    ///
    /// A blocking socket waits for room in a full backlog up to its `SO_SNDTIMEO`.
    /// The corresponding C function is `connect`.
    static func connect(_ socket: FileDescriptor, to path: String) throws(Errno) {
        let result = try withAddress(path) { address, length in
            nothingOrErrno { Glibc.connect(socket.rawValue, address, length) }
        }
        try result.get()
    }

    /// Starts accepting connections, with a queue of `backlog` pending ones.
    ///
    /// The corresponding C function is `listen`.
    static func listen(_ socket: FileDescriptor, backlog: CInt) throws(Errno) {
        try nothingOrErrno { Glibc.listen(socket.rawValue, backlog) }.get()
    }

    /// Accepts one pending connection (non-blocking, close-on-exec); `nil` when none waits.
    ///
    /// The corresponding C function is `accept4`.
    static func accept(_ socket: FileDescriptor) throws(Errno) -> FileDescriptor? {
        let flags = CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue)
        switch valueOrErrno({ portkit_accept4(socket.rawValue, flags) }) {
        case .success(let raw): return FileDescriptor(rawValue: raw)
        case .failure(let error) where error == .wouldBlock: return nil
        // The peer gave up before we took it: nothing to accept after all.
        case .failure(let error) where error.rawValue == ECONNABORTED: return nil
        case .failure(let error): throw error
        }
    }

    /// The path a socket is bound to (`getsockname`), or `nil` if it has none.
    static func boundPath(_ socket: FileDescriptor) -> String? {
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
    static func isListeningStream(_ socket: FileDescriptor) -> Bool {
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
    static func setSendTimeout(_ socket: FileDescriptor, _ timeout: Duration) throws(Errno) {
        let (seconds, attoseconds) = max(timeout, .microseconds(1)).components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        if value.tv_sec == 0 && value.tv_usec == 0 { value.tv_usec = 1 }
        try nothingOrErrno {
            setsockopt(socket.rawValue, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }.get()
    }
}

/// File-system calls of the name server: its directory, socket file and lock file.
enum FileSystem {
    /// What `lstat` says about a path.
    struct Status {
        var mode: mode_t
        var owner: uid_t
        var device: UInt
        var inode: UInt

        var isDirectory: Bool { mode & S_IFMT == S_IFDIR }
        var isSocket: Bool { mode & S_IFMT == S_IFSOCK }
        /// The permission bits (`0o777`).
        var permissions: mode_t { mode & 0o777 }
    }

    /// `lstat(path)`: the path itself, a symbolic link is not followed.
    ///
    /// The corresponding C function is `lstat`.
    static func status(_ path: String) throws(Errno) -> Status {
        var info = stat()
        try nothingOrErrno { lstat(path, &info) }.get()
        return Status(mode: info.st_mode, owner: info.st_uid, device: UInt(info.st_dev), inode: UInt(info.st_ino))
    }

    /// `fstat(descriptor)`.
    ///
    /// The corresponding C function is `fstat`.
    static func status(_ descriptor: FileDescriptor) throws(Errno) -> Status {
        var info = stat()
        try nothingOrErrno { fstat(descriptor.rawValue, &info) }.get()
        return Status(mode: info.st_mode, owner: info.st_uid, device: UInt(info.st_dev), inode: UInt(info.st_ino))
    }

    /// Makes a directory with `mode` (less the umask).
    ///
    /// The corresponding C function is `mkdir`.
    static func makeDirectory(_ path: String, mode: mode_t) throws(Errno) {
        try nothingOrErrno { mkdir(path, mode) }.get()
    }

    /// Sets a path's permission bits.
    ///
    /// The corresponding C function is `chmod`.
    static func setPermissions(_ path: String, _ mode: mode_t) throws(Errno) {
        try nothingOrErrno { chmod(path, mode) }.get()
    }

    /// Removes a file name.
    ///
    /// The corresponding C function is `unlink`.
    static func remove(_ path: String) throws(Errno) {
        try nothingOrErrno { unlink(path) }.get()
    }

    /// Opens (making it if needed, mode 0600) a lock file, close-on-exec.
    ///
    /// The corresponding C function is `open`.
    static func openLockFile(_ path: String) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }.get())
    }

    /// Opens `/dev/null` for reading, close-on-exec (a spare descriptor).
    ///
    /// The corresponding C function is `open`.
    static func openNull() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { open("/dev/null", O_RDONLY | O_CLOEXEC) }.get())
    }

    /// Takes an exclusive `flock` without waiting; `false` if another holds it.
    ///
    /// The corresponding C function is `flock`.
    static func tryLock(_ descriptor: FileDescriptor) throws(Errno) -> Bool {
        switch nothingOrErrno({ flock(descriptor.rawValue, LOCK_EX | LOCK_NB) }) {
        case .success: return true
        case .failure(let error) where error == .wouldBlock: return false
        case .failure(let error): throw error
        }
    }
}
