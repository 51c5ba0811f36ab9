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
}
