import CPortKitSystem
import Glibc

/// The bare descriptors the raw baselines are built from, each made or refused in one place.
enum RawSockets {
    /// A connected pair of Unix stream sockets (close-on-exec; blocking unless `nonBlocking`).
    /// - Throws: `BenchmarkError.system` when `socketpair` fails.
    static func streamPair(nonBlocking: Bool = false) throws(BenchmarkError) -> (CInt, CInt) {
        var flags = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue)
        if nonBlocking { flags |= CInt(SOCK_NONBLOCK.rawValue) }
        var ends: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, flags, 0, &ends) == 0 else { throw .lastSystemError("socketpair") }
        return (ends[0], ends[1])
    }

    /// An epoll instance (close-on-exec) that watches `descriptor` for input, its
    /// `data.fd` set to it.
    /// - Throws: `BenchmarkError.system` when `epoll_create1` or `epoll_ctl` fails (the
    ///   instance is then closed).
    static func epoll(watchingInput descriptor: CInt) throws(BenchmarkError) -> CInt {
        let epoll = epoll_create1(CInt(EPOLL_CLOEXEC))
        guard epoll >= 0 else { throw .lastSystemError("epoll_create1") }
        var interest = epoll_event()
        interest.events = EPOLLIN.rawValue
        interest.data.fd = descriptor
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &interest) == 0 else {
            let error = BenchmarkError.lastSystemError("epoll_ctl(ADD)")
            _ = close(epoll)
            throw error
        }
        return epoll
    }

    /// Reads one whole message of `buffer.count` bytes and the descriptor sent with it (-1:
    /// none), however many reads it takes. False at the end of the stream or on an error.
    static func receiveMessage(_ socket: CInt, _ buffer: inout [UInt8], descriptor: inout CInt) -> Bool {
        var offset = 0
        descriptor = -1
        while offset < buffer.count {
            var fds: CInt = -1
            var count: CInt = 0
            var truncated: CInt = 0
            let read = buffer.withUnsafeMutableBytes { raw in
                portkit_receive_with_descriptors(socket, raw.baseAddress! + offset, raw.count - offset, &fds, 1, &count, &truncated, 0)
            }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { return false }
            if count > 0 { descriptor = fds }
            offset += read
        }
        return true
    }

    /// Sends `buffer` in one call, with `descriptor` attached when it is not -1; true when
    /// all of it went.
    static func sendMessage(_ socket: CInt, _ buffer: [UInt8], descriptor: CInt = -1) -> Bool {
        var fd = descriptor
        let sent = buffer.withUnsafeBytes {
            portkit_send_with_descriptors(socket, $0.baseAddress, $0.count, &fd, descriptor < 0 ? 0 : 1, CInt(MSG_NOSIGNAL))
        }
        return sent == buffer.count
    }

    /// A listening Unix stream socket (close-on-exec, blocking) bound in a fresh temporary
    /// directory, and its path; `removeListener` takes both away.
    /// - Throws: `BenchmarkError.system` when the directory or the socket cannot be made.
    static func listener() throws(BenchmarkError) -> (socket: CInt, path: String) {
        var template = Array("/tmp/portkit-bench-raw-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw .lastSystemError("mkdtemp")
        }
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + "/raw.sock"
        let listener = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0, withAddress(path, { Glibc.bind(listener, $0, $1) }) == 0, listen(listener, 128) == 0 else {
            throw .lastSystemError("bind/listen \(path)")
        }
        return (listener, path)
    }

    /// A blocking Unix stream socket connected to `path`, or -1 (with errno).
    static func connect(to path: String) -> CInt {
        let connection = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard connection >= 0 else { return -1 }
        guard withAddress(path, { Glibc.connect(connection, $0, $1) }) == 0 else {
            let error = errno
            close(connection)
            errno = error
            return -1
        }
        return connection
    }

    /// A Unix socket of `type` (`SOCK_STREAM`, `SOCK_DGRAM`; close-on-exec, blocking) bound at
    /// `path`, listening when it is a stream socket.
    /// - Throws: `BenchmarkError.system` when the socket cannot be made, bound or listen.
    static func bound(_ type: __socket_type, at path: String) throws(BenchmarkError) -> CInt {
        let bound = socket(AF_UNIX, CInt(type.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard bound >= 0 else { throw .lastSystemError("socket") }
        guard withAddress(path, { Glibc.bind(bound, $0, $1) }) == 0, type != SOCK_STREAM || listen(bound, 4096) == 0 else {
            let error = BenchmarkError.lastSystemError("bind/listen \(path)")
            close(bound)
            throw error
        }
        return bound
    }

    /// Removes a `listener()`'s socket file and its directory.
    static func removeListener(_ path: String) {
        unlink(path)
        rmdir(String(path.dropLast("/raw.sock".count)))
    }

    private static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes.prefix(raw.count - 1))
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}
