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

    // MARK: names.death

    /// `names.death`: from SIGKILL of the process holding a name's connection to the
    /// watcher's `-` event. The owner is a minimal process (`/bin/sleep`) that inherited a
    /// connection on which the name was registered, so the time is the kernel's teardown
    /// of a process plus the server noticing and telling the watcher. `raw` is the kernel's
    /// part alone: SIGKILL of a `/bin/sleep` holding one end of a socket pair until the
    /// other end, in this process, polls as hung up.
    static func death(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.death", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                let watcher = try NameServerClient.blockingConnect(to: fixture.address)
                let watch = try watcher.blockingWatch(prefix: "bench.death")
                return .init(
                    measure: {
                        try medianMicroseconds(count) { try deathOnce(fixture.address, watch) }
                    },
                    stop: {
                        watch.cancel()
                        watcher.close()
                        fixture.stop()
                    })
            },
            BenchmarkImpl("raw") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce() } })
            },
            BenchmarkImpl("raw-relayed") {
                let relay = try RawDeathRelay()
                return .init(
                    measure: { try medianMicroseconds(count) { try relayedDeathOnce(relay) } },
                    stop: relay.stop)
            },
            DBusBenchmarks.death(count: count),
        ])
    }

    /// `raw`'s death told through a relay thread: the same victim, one hop more. As in the
    /// PortKit impl, the relay takes its end before the victim is spawned.
    private static func relayedDeathOnce(_ relay: RawDeathRelay) throws -> Duration {
        let fds = try RawSockets.streamPair()
        do {
            try relay.watch(fds.0)
        } catch {
            close(fds.0)
            close(fds.1)
            throw error
        }
        let holder: pid_t
        do {
            holder = try spawnHolder(fds.1)
        } catch {
            close(fds.1)  // the relay sees the hang-up and closes its end
            throw error
        }
        close(fds.1)
        return try relay.killAndAwaitWord(holder)
    }

    // MARK: names.death-floor

    /// `names.death-floor`: the kernel's part of `names.death` alone (SIGKILL → the other end
    /// of a socket the victim held polls as hung up), for three kinds of victim. In
    /// `do_exit` the kernel tears the address space down (`exit_mm`) before it closes the
    /// files (`exit_files`), so the floor grows with the victim:
    /// - `fresh-sleep`: `/bin/sleep` killed as soon as `posix_spawn` returns, still starting
    ///   up: what `names.death` kills, in both of its impls;
    /// - `settled-sleep`: `/bin/sleep` once it sleeps (its `/proc` state is `S`);
    /// - `settled-swift`: this executable (Swift, Foundation, PortKit loaded) as its
    ///   `raw-echo` child, once it has echoed a byte and sleeps in `read`: an owner of the
    ///   kind a PortKit program is.
    static func deathFloor(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.death-floor", unit: "µs", impls: [
            BenchmarkImpl("fresh-sleep") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce() } })
            },
            BenchmarkImpl("settled-sleep") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce(settled: true) } })
            },
            BenchmarkImpl("settled-swift") {
                .init(measure: { try medianMicroseconds(count) { try swiftDeathOnce() } })
            },
        ])
    }

    /// SIGKILL of this executable's `raw-echo` child, settled, until its channel hangs up.
    private static func swiftDeathOnce() throws -> Duration {
        let fds = try RawSockets.streamPair()
        defer { close(fds.0) }
        let child = try BenchProcess.spawn(["raw-echo"], descriptors: [fds.1])
        close(fds.1)
        var byte: UInt8 = 1
        guard send(fds.0, &byte, 1, CInt(MSG_NOSIGNAL)) == 1, recv(fds.0, &byte, 1, 0) == 1 else {
            kill(child.pid, SIGKILL)
            var status: CInt = 0
            waitpid(child.pid, &status, 0)
            throw BenchmarkError.lastSystemError("echo from the raw-echo child")
        }
        try waitUntilAsleep(child.pid)
        return try killAndAwaitHangUp(child.pid, fds.0)
    }

    /// SIGKILL of a `/bin/sleep` holding one end of a socket pair until this end polls as
    /// hung up; `settled`: once the sleep sleeps, else at once after the spawn.
    private static func rawDeathOnce(settled: Bool = false) throws -> Duration {
        let fds = try RawSockets.streamPair()
        defer { close(fds.0) }
        let holder = try spawnHolder(fds.1)
        close(fds.1)
        if settled { try waitUntilAsleep(holder) }
        return try killAndAwaitHangUp(holder, fds.0)
    }

    private static func killAndAwaitHangUp(_ pid: pid_t, _ socket: CInt) throws -> Duration {
        guard let elapsed = killAndTime(pid, untilReadable: socket) else {
            throw BenchmarkError.timedOut("the holder's end to hang up")
        }
        return elapsed
    }

    /// Polls `/proc/PID/stat` until the process sleeps (state `S`), for at most 5 s.
    private static func waitUntilAsleep(_ pid: pid_t) throws {
        let path = "/proc/\(pid)/stat"
        let deadline = ContinuousClock.now + .seconds(5)
        var buffer = [UInt8](repeating: 0, count: 512)
        while ContinuousClock.now < deadline {
            let file = open(path, O_RDONLY | O_CLOEXEC)
            guard file >= 0 else { throw BenchmarkError.lastSystemError("open \(path)") }
            let count = buffer.withUnsafeMutableBytes { read(file, $0.baseAddress, $0.count) }
            close(file)
            // The state is the field after the command name, which ends with the last ')'.
            if count > 0, let close = buffer[..<count].lastIndex(of: UInt8(ascii: ")")), close + 2 < count,
               buffer[close + 2] == UInt8(ascii: "S") {
                return
            }
            sched_yield()
        }
        throw BenchmarkError.timedOut("process \(pid) to sleep")
    }

    private static func deathOnce(_ address: String, _ watch: NameWatch) throws -> Duration {
        let name = "bench.death"
        var connection = try RawNameConnection(address: address)
        try connection.register(name)
        guard case .appeared? = try watch.next(timeout: .seconds(10)) else {
            throw BenchmarkError.timedOut("the watcher to see \(name) appear")
        }
        let owner = try spawnHolder(connection.socket, connection.portEnd)
        connection.close()
        let start = ContinuousClock.now
        kill(owner, SIGKILL)
        let event = try watch.next(timeout: .seconds(10))
        let elapsed = start.duration(to: .now)
        var status: CInt = 0
        waitpid(owner, &status, 0)
        guard case .vanished? = event else { throw BenchmarkError.timedOut("the watcher to see \(name) vanish") }
        return elapsed
    }

    /// Starts `/bin/sleep` holding `sockets` as its descriptors 3, 4, ….
    static func spawnHolder(_ sockets: CInt...) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (index, socket) in sockets.enumerated() { posix_spawn_file_actions_adddup2(&actions, socket, 3 + CInt(index)) }
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("600"), nil]
        defer { for pointer in argv { free(pointer) } }
        let status = posix_spawn(&pid, "/bin/sleep", &actions, nil, argv, environ)
        guard status == 0 else { throw BenchmarkError.system(operation: "posix_spawn /bin/sleep", errno: status) }
        return pid
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

/// A name-protocol connection spoken by hand (for `names.death`, whose owner process is
/// not a PortKit program): connect, say hello, register with a port of its own (one end of
/// a socket pair, `portEnd` the other), hand both over.
struct RawNameConnection {
    let socket: CInt
    /// The other end of the registered port's connection: whoever holds it keeps the port
    /// (and so the name) alive.
    private(set) var portEnd: CInt = -1

    init(address: String) throws {
        socket = Glibc.socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var name = sockaddr_un()
        name.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(address.utf8)
        withUnsafeMutableBytes(of: &name.sun_path) { $0.copyBytes(from: bytes.prefix($0.count - 1)) }
        let status = withUnsafePointer(to: &name) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard socket >= 0, status == 0 else { throw BenchmarkError.lastSystemError("connect \(address)") }
    }

    /// Says hello, registers `name` on this connection with a port of its own (with
    /// `.cluster` scope when `cluster`), and waits for the server's two oks.
    mutating func register(_ name: String, cluster: Bool = false) throws {
        let version = withUnsafeBytes(of: UInt64(4).littleEndian) { Array($0) }
        let hello = try WireCodec.encode(WireMessage(
            kind: .request, id: NameOperation.hello.rawValue, sequence: 1, components: [.bytes(version)]))
        let register = try WireCodec.encode(WireMessage(
            kind: .request, id: NameOperation.register.rawValue, sequence: 2,
            components: [.bytes(Array(name.utf8)), .port(index: 0)]
                + (cluster ? [.bytes(withUnsafeBytes(of: NameScope.cluster.rawValue.littleEndian) { Array($0) })] : [])))
        var ends: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw BenchmarkError.lastSystemError("socketpair")
        }
        portEnd = ends[1]
        defer { Glibc.close(ends[0]) }  // sent: the server holds its own copy
        let frames = hello + register
        let sent = try frames.withUnsafeBytes { raw in try FileDescriptor(rawValue: socket).send(raw, descriptors: [ends[0]]) }
        guard sent == frames.count else { throw BenchmarkError.lastSystemError("send register") }
        var splitter = WireFrameSplitter()
        var buffer = [UInt8](repeating: 0, count: 4096)
        var oks = 0
        while oks < 2 {
            if let reply = try splitter.nextFrame() {
                let message = try WireCodec.decode(reply, descriptorCount: 0)
                if message.kind == .limits { continue }
                guard message.kind == .reply, message.id == NameStatus.ok.rawValue else {
                    throw BenchmarkError.system(operation: "register \(name): status \(message.id)", errno: 0)
                }
                oks += 1
                continue
            }
            let count = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
            guard count > 0 else { throw BenchmarkError.lastSystemError("read register reply") }
            splitter.append(Array(buffer[..<count]))
        }
    }

    func close() {
        Glibc.close(socket)
        if portEnd >= 0 { Glibc.close(portEnd) }
    }
}
