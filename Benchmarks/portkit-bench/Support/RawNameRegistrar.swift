import CPortKitSystem
import Glibc

/// The floor of `names.register`: the least kernel work a registration that hands the
/// server a port and a release that takes it back need, spoken by hand with no framing and
/// no loop of PortKit's.
///
/// A kept Unix stream connection to a "server" thread waiting in its epoll set. A register
/// is a fresh `socketpair` (the port's connection): one end stays with the caller, the
/// other goes with a 32-byte request (SCM_RIGHTS); the server adds it to its epoll set to
/// see the owner hang up, as a name server must, and answers 32 bytes. A release is a
/// 32-byte request whose answer comes once the server took the end out of its set and
/// closed it. The caller closes its end after the clock stops.
final class RawNameRegistrar: Sendable {
    private static let size = 32
    /// The request's first byte.
    private static let registerRequest: UInt8 = 1
    private static let releaseRequest: UInt8 = 2
    private let client: CInt
    private let serverEnd: CInt
    private let epoll: CInt
    private let server: PosixThread

    /// Starts the server thread.
    /// - Throws: `BenchmarkError.system` when a descriptor or the thread cannot be made.
    init() throws(BenchmarkError) {
        let pair = try RawSockets.streamPair()
        let epoll = try RawSockets.epoll(watchingInput: pair.1)
        client = pair.0
        serverEnd = pair.1
        self.epoll = epoll
        let socket = pair.1
        server = try PosixThread.start(name: "bench-raw-registrar") { Self.serve(epoll, socket) }
    }

    /// One register and its release; the kept end is closed after the clock stops.
    func registerAndRelease() throws -> Duration {
        var buffer = [UInt8](repeating: 7, count: Self.size)
        var unused: CInt = -1
        let start = ContinuousClock.now
        let port = try RawSockets.streamPair(nonBlocking: true)
        buffer[0] = Self.registerRequest
        let sent = RawSockets.sendMessage(client, buffer, descriptor: port.1)
        close(port.1)
        guard sent, RawSockets.receiveMessage(client, &buffer, descriptor: &unused) else {
            close(port.0)
            throw BenchmarkError.lastSystemError("raw register")
        }
        buffer[0] = Self.releaseRequest
        guard RawSockets.sendMessage(client, buffer), RawSockets.receiveMessage(client, &buffer, descriptor: &unused) else {
            close(port.0)
            throw BenchmarkError.lastSystemError("raw release")
        }
        let elapsed = start.duration(to: .now)
        close(port.0)
        return elapsed
    }

    /// Ends the server thread and closes every descriptor.
    func stop() {
        shutdown(client, CInt(SHUT_RDWR))
        server.join()
        close(client)
        close(serverEnd)
        close(epoll)
    }

    /// The server: answers register and release requests, and drops a held end whose
    /// owner hung up.
    private static func serve(_ epoll: CInt, _ socket: CInt) {
        var events = [epoll_event](repeating: epoll_event(), count: 16)
        var buffer = [UInt8](repeating: 0, count: size)
        var held: CInt = -1
        serving: while true {
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 16, -1) }
            if count < 0 { if errno == EINTR { continue } else { break } }
            for index in 0..<Int(count) where events[index].data.fd != socket {
                // The owner hung up before releasing.
                let gone = events[index].data.fd
                epoll_ctl(epoll, EPOLL_CTL_DEL, gone, nil)
                close(gone)
                if gone == held { held = -1 }
            }
            for index in 0..<Int(count) where events[index].data.fd == socket {
                var received: CInt = -1
                guard RawSockets.receiveMessage(socket, &buffer, descriptor: &received) else { break serving }
                if buffer[0] == registerRequest, received >= 0 {
                    var interest = epoll_event()
                    interest.events = EPOLLRDHUP.rawValue
                    interest.data.fd = received
                    epoll_ctl(epoll, EPOLL_CTL_ADD, received, &interest)
                    held = received
                } else if buffer[0] == releaseRequest, held >= 0 {
                    epoll_ctl(epoll, EPOLL_CTL_DEL, held, nil)
                    close(held)
                    held = -1
                }
                guard RawSockets.sendMessage(socket, buffer) else { break serving }
            }
        }
        if held >= 0 { close(held) }
    }
}
