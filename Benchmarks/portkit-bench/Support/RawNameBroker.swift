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
///
/// `listening()` is the floor of `names.connect-lookup`: the server thread accepts on a
/// listening socket instead, and each lookup comes on a new connection.
final class RawNameBroker: Sendable {
    private static let size = 32
    /// The kept connection (-1 when listening).
    private let client: CInt
    /// The server's end of the kept connection, or the listening socket.
    private let serverEnd: CInt
    private let listenerPath: String?
    private let ownerChannel: (server: CInt, owner: CInt)
    private let ownerEpoll: CInt
    private let server: PosixThread
    private let owner: PosixThread

    /// Starts the server and owner threads, the server answering on a kept connection.
    /// - Throws: `BenchmarkError.system` when a descriptor or a thread cannot be made.
    convenience init() throws(BenchmarkError) {
        let pair = try RawSockets.streamPair()
        let serverSocket = pair.1
        try self.init(client: pair.0, serverEnd: pair.1, listenerPath: nil) { toOwner in RawNameBroker.serve(serverSocket, toOwner) }
    }

    /// Starts the server and owner threads, the server accepting on a listening socket and
    /// answering each connection until it closes.
    /// - Throws: `BenchmarkError.system` when a descriptor or a thread cannot be made.
    static func listening() throws(BenchmarkError) -> RawNameBroker {
        let (listener, path) = try RawSockets.listener()
        return try RawNameBroker(client: -1, serverEnd: listener, listenerPath: path) { toOwner in
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 {
                    if errno == EINTR { continue }
                    return
                }
                serve(connection, toOwner)
                close(connection)
            }
        }
    }

    private init(
        client: CInt, serverEnd: CInt, listenerPath: String?, serving: @escaping @Sendable (_ toOwner: CInt) -> Void
    ) throws(BenchmarkError) {
        let ownerPair = try RawSockets.streamPair()
        let epoll = try RawSockets.epoll(watchingInput: ownerPair.1)
        self.client = client
        self.serverEnd = serverEnd
        self.listenerPath = listenerPath
        ownerChannel = ownerPair
        ownerEpoll = epoll
        let toOwner = ownerPair.0
        server = try PosixThread.start(name: "bench-raw-broker") {
            serving(toOwner)
            // Closing its side of the owner channel ends the owner.
            shutdown(toOwner, CInt(SHUT_RDWR))
            close(toOwner)
        }
        let fromServer = ownerPair.1
        owner = try PosixThread.start(name: "bench-raw-owner") { Self.own(epoll, fromServer) }
    }

    /// One lookup on the kept connection: request, reply with a connected socket; the
    /// socket is closed after the clock stops.
    func lookup() throws -> Duration {
        let start = ContinuousClock.now
        let received = try Self.lookUp(on: client)
        let elapsed = start.duration(to: .now)
        close(received)
        return elapsed
    }

    /// A new connection to the listening server and one lookup on it; both sockets are
    /// closed after the clock stops.
    func connectAndLookup() throws -> Duration {
        guard let listenerPath else { throw BenchmarkError.system(operation: "connect", errno: EINVAL) }
        let start = ContinuousClock.now
        let connection = RawSockets.connect(to: listenerPath)
        guard connection >= 0 else { throw BenchmarkError.lastSystemError("raw broker connect") }
        defer { close(connection) }
        let received = try Self.lookUp(on: connection)
        let elapsed = start.duration(to: .now)
        close(received)
        return elapsed
    }

    /// Ends both threads and closes every descriptor.
    func stop() {
        // Wakes the server out of its read, or out of accept.
        shutdown(client >= 0 ? client : serverEnd, CInt(SHUT_RDWR))
        server.join()
        owner.join()
        if client >= 0 { close(client) }
        close(serverEnd)
        if let listenerPath { RawSockets.removeListener(listenerPath) }
        close(ownerChannel.owner)
        close(ownerEpoll)
    }

    /// A 32-byte request on `socket` and its reply's descriptor.
    private static func lookUp(on socket: CInt) throws -> CInt {
        var buffer = [UInt8](repeating: 7, count: size)
        guard buffer.withUnsafeBytes({ send(socket, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }) == size else {
            throw BenchmarkError.lastSystemError("raw broker request")
        }
        var received: CInt = -1
        guard RawSockets.receiveMessage(socket, &buffer, descriptor: &received), received >= 0 else {
            throw BenchmarkError.lastSystemError("raw broker reply")
        }
        return received
    }

    /// Answers lookups on `socket` until it ends.
    private static func serve(_ socket: CInt, _ toOwner: CInt) {
        var buffer = [UInt8](repeating: 0, count: size)
        var unused: CInt = -1
        while RawSockets.receiveMessage(socket, &buffer, descriptor: &unused) {
            guard let ends = try? RawSockets.streamPair(nonBlocking: true) else { break }
            _ = RawSockets.sendMessage(socket, buffer, descriptor: ends.1)
            close(ends.1)
            _ = RawSockets.sendMessage(toOwner, buffer, descriptor: ends.0)
            close(ends.0)
        }
    }

    /// The owner: adopts each end into its epoll set, closes it on hang-up.
    private static func own(_ epoll: CInt, _ fromServer: CInt) {
        var events = [epoll_event](repeating: epoll_event(), count: 16)
        var buffer = [UInt8](repeating: 0, count: 256)
        var message = [UInt8](repeating: 0, count: size)
        var adopted: Set<CInt> = []
        serving: while true {
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 16, -1) }
            if count < 0 { if errno == EINTR { continue } else { break } }
            for index in 0..<Int(count) {
                let socket = events[index].data.fd
                if socket == fromServer {
                    var connection: CInt = -1
                    guard RawSockets.receiveMessage(fromServer, &message, descriptor: &connection) else { break serving }
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
}
