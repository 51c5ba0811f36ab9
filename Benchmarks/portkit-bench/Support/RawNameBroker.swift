import CPortKitSystem
import Glibc

/// The second baseline of `names.lookup`: the least kernel work a lookup that brokers a
/// connection needs, spoken by hand with no framing and no loop.
///
/// A kept Unix stream connection to a "server" thread which, per 32-byte request, makes a
/// fresh `socketpair`, sends one end back with the 32-byte reply (SCM_RIGHTS) and the other
/// to an "owner" thread, which watches it in its epoll set and closes it when it hangs up.
/// The caller closes its end after each lookup, as the PortKit case invalidates its port.
/// `raw` (a bare request/response) is the same minus the socket pair and the two passes.
final class RawNameBroker: Sendable {
    private static let size = 32
    private let client: CInt
    private let serverEnd: CInt
    private let ownerChannel: (server: CInt, owner: CInt)
    private let ownerEpoll: CInt
    private let server: PosixThread
    private let owner: PosixThread

    /// Starts the server and owner threads.
    /// - Throws: `BenchmarkError.system` when a descriptor or a thread cannot be made.
    init() throws(BenchmarkError) {
        let clientPair = try RawSockets.streamPair()
        let ownerPair = try RawSockets.streamPair()
        let epoll = try RawSockets.epoll(watchingInput: ownerPair.1)
        client = clientPair.0
        serverEnd = clientPair.1
        ownerChannel = ownerPair
        ownerEpoll = epoll
        let serverSocket = clientPair.1
        let toOwner = ownerPair.0
        server = try PosixThread.start(name: "bench-raw-broker") { Self.serve(serverSocket, toOwner) }
        let fromServer = ownerPair.1
        owner = try PosixThread.start(name: "bench-raw-owner") { Self.own(epoll, fromServer) }
    }

    /// One lookup: request, reply with a connected socket; the socket is closed after the
    /// clock stops.
    func lookup() throws -> Duration {
        var buffer = [UInt8](repeating: 7, count: Self.size)
        let start = ContinuousClock.now
        guard buffer.withUnsafeBytes({ send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }) == Self.size else {
            throw BenchmarkError.lastSystemError("raw broker request")
        }
        var received: CInt = -1
        guard Self.receive(client, &buffer, descriptor: &received), received >= 0 else {
            throw BenchmarkError.lastSystemError("raw broker reply")
        }
        let elapsed = start.duration(to: .now)
        close(received)
        return elapsed
    }

    /// Ends both threads and closes every descriptor.
    func stop() {
        shutdown(client, CInt(SHUT_RDWR))
        server.join()  // it closes its side of the owner channel, which ends the owner
        owner.join()
        close(client)
        close(serverEnd)
        close(ownerChannel.owner)
        close(ownerEpoll)
    }

    private static func serve(_ socket: CInt, _ toOwner: CInt) {
        var buffer = [UInt8](repeating: 0, count: size)
        var unused: CInt = -1
        while receive(socket, &buffer, descriptor: &unused) {
            guard let ends = try? RawSockets.streamPair(nonBlocking: true) else { break }
            _ = sendWith(socket, buffer, descriptor: ends.1)
            close(ends.1)
            _ = sendWith(toOwner, buffer, descriptor: ends.0)
            close(ends.0)
        }
        shutdown(toOwner, CInt(SHUT_RDWR))
        close(toOwner)
    }

    /// The owner: adopts each end into its epoll set, closes it on hang-up.
    private static func own(_ epoll: CInt, _ fromServer: CInt) {
        var events = [epoll_event](repeating: epoll_event(), count: 16)
        var buffer = [UInt8](repeating: 0, count: 256)
        var adopted: Set<CInt> = []
        serving: while true {
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 16, -1) }
            if count < 0 { if errno == EINTR { continue } else { break } }
            for index in 0..<Int(count) {
                let socket = events[index].data.fd
                if socket == fromServer {
                    var connection: CInt = -1
                    guard receive(fromServer, &buffer, descriptor: &connection) else { break serving }
                    guard connection >= 0 else { continue }
                    var interest = epoll_event()
                    interest.events = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
                    interest.data.fd = connection
                    epoll_ctl(epoll, EPOLL_CTL_ADD, connection, &interest)
                    adopted.insert(connection)
                } else {
                    let read = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, CInt(MSG_DONTWAIT)) }
                    if read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR) {
                        epoll_ctl(epoll, EPOLL_CTL_DEL, socket, nil)
                        close(socket)
                        adopted.remove(socket)
                    }
                }
            }
        }
        for socket in adopted { close(socket) }
    }

    /// Reads one whole message of `size` bytes and the descriptor sent with it (-1: none).
    /// Returns false at the end of the stream or on an error.
    private static func receive(_ socket: CInt, _ buffer: inout [UInt8], descriptor: inout CInt) -> Bool {
        var offset = 0
        descriptor = -1
        while offset < size {
            var fds: CInt = -1
            var count: CInt = 0
            var truncated: CInt = 0
            let read = buffer.withUnsafeMutableBytes { raw in
                portkit_receive_with_descriptors(socket, raw.baseAddress! + offset, size - offset, &fds, 1, &count, &truncated, 0)
            }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { return false }
            if count > 0 { descriptor = fds }
            offset += read
        }
        return true
    }

    private static func sendWith(_ socket: CInt, _ buffer: [UInt8], descriptor: CInt) -> Bool {
        var fd = descriptor
        let sent = buffer.withUnsafeBytes { portkit_send_with_descriptors(socket, $0.baseAddress, $0.count, &fd, 1, CInt(MSG_NOSIGNAL)) }
        return sent == size
    }
}
