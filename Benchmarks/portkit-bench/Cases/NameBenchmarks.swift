import CPortKitSystem
import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitSystem

/// The name server against a bare Unix-socket round trip: what a lookup, a registration,
/// a first connection and an owner's death cost. The server is embedded in this process
/// (its own thread), as `NameServer.start` gives it; a client reads its replies itself.
enum NameBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let lookup = lookup(count: scale.count(500, quick: 20))
        let owner = ownerQuery(count: scale.count(500, quick: 20))
        let register = register(count: scale.count(500, quick: 20))
        let connectLookup = connectLookup(count: scale.count(200, quick: 10))
        return [
            lookup,
            call(count: scale.count(2000, quick: 100)),
            owner,
            register,
            connectLookup,
            death(count: scale.count(30, quick: 3)),
            deathFloor(count: scale.count(30, quick: 3)),
            // The same on one CPU: what the code costs against the floors, reproducibly
            // (the in-process impls only; D-Bus's daemon is another process).
            lookup.pinned(.together, as: "names.lookup-same-cpu", impls: ["portkit", "raw", "raw-brokered"]),
            owner.pinned(.together, as: "names.owner-same-cpu"),
            register.pinned(.together, as: "names.register-same-cpu"),
            connectLookup.pinned(.together, as: "names.connect-lookup-same-cpu"),
        ]
    }

    // MARK: names.lookup

    /// `names.lookup`: the median lookup on a kept connection (request → a send port
    /// connected to the owner, brokered socket pair and all), against `raw`: one bare
    /// request/response over a connected Unix socket to a thread that answers it; and
    /// against `raw-brokered`: the same plus the kernel work any brokered lookup needs (a
    /// fresh socket pair, one end back to the caller and one to an owner thread that watches
    /// it and closes it on hang-up), with no framing and no loop.
    static func lookup(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.lookup", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                let client = try NameServerClient.blockingConnect(to: fixture.address)
                return .init(
                    measure: {
                        try medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            let port = try client.blockingLookup(fixture.name)
                            let elapsed = start.duration(to: .now)
                            port.invalidate()
                            return elapsed
                        }
                    },
                    stop: {
                        client.close()
                        fixture.stop()
                    })
            },
            rawRequest(count: count),
            BenchmarkImpl("raw-brokered") {
                let broker = try RawNameBroker()
                return .init(
                    measure: { try medianMicroseconds(count) { try broker.lookup() } },
                    stop: broker.stop)
            },
            DBusBenchmarks.lookup(count: count),
        ])
    }

    /// `raw`: one bare 32-byte request/response over a connected Unix socket to a thread
    /// that answers it, `count` times; the median.
    static func rawRequest(count: Int) -> BenchmarkImpl {
        BenchmarkImpl("raw") {
            let echo = try RawEcho.pair()
            return .init(
                measure: { try medianMicroseconds(count) { try echo.roundTrip() } },
                stop: echo.stop)
        }
    }

    /// `names.owner`: who holds a name, on a kept connection: one plain request/response
    /// through the server (no connection brokered), against `raw`'s bare request/response.
    static func ownerQuery(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.owner", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                let client = try NameServerClient.blockingConnect(to: fixture.address)
                return .init(
                    measure: {
                        try medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            _ = try client.blockingOwner(of: fixture.name)
                            return start.duration(to: .now)
                        }
                    },
                    stop: {
                        client.close()
                        fixture.stop()
                    })
            },
            rawRequest(count: count),
        ])
    }

    // MARK: names.register

    /// `names.register`: register a name and release it, on a kept connection (two requests,
    /// the register carrying a port), against `raw`: one bare request/response; and against
    /// `raw-registered`: the kernel work any such register and release needs (a fresh socket
    /// pair whose end goes with the request, the server watching it for a hang-up, then a
    /// second request that has it closed), with no framing and no loop.
    static func register(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.register", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                let client = try NameServerClient.blockingConnect(to: fixture.address)
                let port = ReceivePort()
                return .init(
                    measure: {
                        try medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            try client.blockingRegister("bench.register", port: port)
                            try client.blockingUnregister("bench.register")
                            return start.duration(to: .now)
                        }
                    },
                    stop: {
                        client.close()
                        port.invalidate()
                        fixture.stop()
                    })
            },
            rawRequest(count: count),
            BenchmarkImpl("raw-registered") {
                let registrar = try RawNameRegistrar()
                return .init(
                    measure: { try medianMicroseconds(count) { try registrar.registerAndRelease() } },
                    stop: registrar.stop)
            },
        ])
    }

    // MARK: names.connect-lookup

    /// `names.connect-lookup`: a new connection to the server (with its hello) and one
    /// lookup, against `raw`: connect to a listening Unix socket and one request/response;
    /// and against `raw-brokered`: connect, and one lookup as `names.lookup`'s
    /// `raw-brokered` does it (a socket pair made, one end back, one to an owner thread).
    static func connectLookup(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.connect-lookup", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                return .init(
                    measure: {
                        try medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            let client = try NameServerClient.blockingConnect(to: fixture.address)
                            let port = try client.blockingLookup(fixture.name)
                            let elapsed = start.duration(to: .now)
                            port.invalidate()
                            client.close()
                            return elapsed
                        }
                    },
                    stop: fixture.stop)
            },
            BenchmarkImpl("raw") {
                let listener = try RawEcho.listening()
                return .init(
                    measure: { try medianMicroseconds(count) { try listener.connectAndRoundTrip() } },
                    stop: listener.stop)
            },
            BenchmarkImpl("raw-brokered") {
                let broker = try RawNameBroker.listening()
                return .init(
                    measure: { try medianMicroseconds(count) { try broker.connectAndLookup() } },
                    stop: broker.stop)
            },
        ])
    }

    // MARK: Shared

    /// Runs `sample` `count` times; the median and the p99 of its times in µs.
    static func medianMicroseconds(_ count: Int, _ sample: () throws -> Duration) throws -> RunSample {
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for _ in 0..<count { samples.append(try sample().microseconds) }
        return RunSample(latencies: samples)
    }
}

/// An embedded name server in a private directory, with one name registered by a port on
/// a loop thread of its own.
final class NameFixture: Sendable {
    let directory: String
    let address: String
    let name = "bench.target"
    private let server: NameServer
    private let owner: NameServerClient
    private let port: ReceivePort
    private let loop: PortKitLoopThread

    /// Starts the server with `policy` and registers `name`, whose port answers with the
    /// request's bytes, or with `replySize` bytes if given.
    init(policy: NameServerPolicy = NameServerPolicy(), replySize: Int? = nil) throws {
        var template = Array("/tmp/portkit-bench-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.lastSystemError("mkdtemp")
        }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        address = directory + "/names.sock"
        server = try NameServer.start(at: address, policy: policy)
        loop = try PortKitLoopThread(name: "bench-names")
        port = ReceivePort()
        let reply = replySize.map { [UInt8](repeating: 1, count: $0) }
        try port.schedule(on: loop.loop) { request in Message(id: request.id, bytes: reply ?? request.bytes) }
        owner = try NameServerClient.blockingConnect(to: address)
        try owner.blockingRegister(name, port: port)
    }

    func stop() {
        owner.close()
        port.invalidate()
        server.stop()
        loop.shutDown()
        rmdir(directory)
    }
}

/// The baseline: a thread answering 32-byte requests on Unix stream sockets with blocking
/// reads and writes, no framing and no loop.
private final class RawEcho: Sendable {
    private static let size = 32
    private let client: CInt
    private let listenerPath: String?
    private let serverSocket: CInt
    private let thread: PosixThread

    private init(client: CInt, serverSocket: CInt, listenerPath: String?, thread: PosixThread) {
        self.client = client
        self.serverSocket = serverSocket
        self.listenerPath = listenerPath
        self.thread = thread
    }

    /// A connected pair, the far end answered by a thread.
    static func pair() throws -> RawEcho {
        let fds = try RawSockets.streamPair()
        let far = fds.1
        let thread = try PosixThread.start(name: "bench-raw-echo") { answerUntilClosed(far) }
        return RawEcho(client: fds.0, serverSocket: far, listenerPath: nil, thread: thread)
    }

    /// A listening socket whose thread accepts, answers one request and closes, per connection.
    static func listening() throws -> RawEcho {
        let (listener, path) = try RawSockets.listener()
        let thread = try PosixThread.start(name: "bench-raw-accept") {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 {
                    if errno == EINTR { continue }
                    return
                }
                answerUntilClosed(connection)
            }
        }
        return RawEcho(client: -1, serverSocket: listener, listenerPath: path, thread: thread)
    }

    private static func answerUntilClosed(_ socket: CInt) {
        var buffer = [UInt8](repeating: 0, count: size)
        while readFully(socket, &buffer) && writeFully(socket, buffer) {}
        close(socket)
    }

    /// One request/response on the kept connection.
    func roundTrip() throws -> Duration {
        var buffer = [UInt8](repeating: 7, count: Self.size)
        let start = ContinuousClock.now
        guard Self.writeFully(client, buffer), Self.readFully(client, &buffer) else {
            throw BenchmarkError.lastSystemError("raw round trip")
        }
        return start.duration(to: .now)
    }

    /// Connect, one request/response, close.
    func connectAndRoundTrip() throws -> Duration {
        guard let listenerPath else { throw BenchmarkError.system(operation: "connect", errno: EINVAL) }
        var buffer = [UInt8](repeating: 7, count: Self.size)
        let start = ContinuousClock.now
        let connection = RawSockets.connect(to: listenerPath)
        defer { if connection >= 0 { close(connection) } }
        guard connection >= 0, Self.writeFully(connection, buffer), Self.readFully(connection, &buffer) else {
            throw BenchmarkError.lastSystemError("raw connect and round trip")
        }
        return start.duration(to: .now)
    }

    func stop() {
        if let listenerPath {
            // Wakes the accepting thread out of accept.
            shutdown(serverSocket, CInt(SHUT_RDWR))
            thread.join()
            close(serverSocket)
            RawSockets.removeListener(listenerPath)
        } else {
            shutdown(client, CInt(SHUT_RDWR))
            thread.join()
            close(client)
        }
    }

    private static func readFully(_ socket: CInt, _ buffer: inout [UInt8]) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let count = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress! + offset, $0.count - offset) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }

    private static func writeFully(_ socket: CInt, _ buffer: [UInt8]) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let count = buffer.withUnsafeBytes { send(socket, $0.baseAddress! + offset, $0.count - offset, CInt(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }
}
