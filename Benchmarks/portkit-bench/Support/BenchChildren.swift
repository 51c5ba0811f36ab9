import Glibc
import NamedPortServer
import PortMessaging
import Synchronization

/// The child processes of the process benchmarks: portkit-bench itself, re-run as
/// `portkit-bench --child NAME [ARGS...]` (a hidden subcommand).
///
/// Every child ends when its parent goes away (its channel closes), so a failed or killed
/// benchmark leaves none behind.
enum BenchChildren {
    /// Runs the child named by `arguments[0]`; returns its exit status.
    static func run(_ arguments: [String]) -> Int32 {
        let rest = Array(arguments.dropFirst())
        switch arguments.first {
        case "port-echo": return portEcho()
        case "raw-echo": return rawEcho()
        case "raw-sink": return rawSink(record: rest.first.flatMap { Int($0) })
        case "name-filler": return nameFiller(rest)
        case "socketport-driver": return SocketPortChildren.driver(rest)
        case "socketport-peer": return SocketPortChildren.peer(rest)
        default:
            printError("portkit-bench: unknown child '\(arguments.first ?? "")'")
            return 2
        }
    }

    // MARK: PortKit

    /// Message ids the PortKit child understands.
    enum Op {
        /// A request: the reply carries the same bytes.
        static let echo: UInt32 = 1
        /// One-way: counted (messages and bytes).
        static let count: UInt32 = 2
        /// A request: the reply carries the count of messages and bytes since the last
        /// report (two UInt64), which start again from zero.
        static let report: UInt32 = 3
    }

    /// The largest message the `port-echo` child takes: room for the largest bulk size.
    static let maxMessageBytes = 256 << 20

    /// `port-echo`: checks in with the boss that spawned it (`ChildWorker`) and serves `Op`
    /// messages on its main thread's loop until the boss goes away.
    static func portEcho() -> Int32 {
        do {
            let boss = try ChildWorker.bossPort()
            let loop = ThreadLoop.current
            let port = ReceivePort(maxMessageBytes: maxMessageBytes)
            let messages = Atomic<UInt64>(0)
            let bytes = Atomic<UInt64>(0)
            try port.schedule(on: loop) { message in
                switch message.id {
                case Op.echo:
                    return Message(id: Op.echo, components: message.components)
                case Op.count:
                    messages.add(1, ordering: .relaxed)
                    bytes.add(UInt64(message.bytes.count), ordering: .relaxed)
                    return nil
                case Op.report:
                    let counts = [messages.exchange(0, ordering: .relaxed), bytes.exchange(0, ordering: .relaxed)]
                    return Message(id: Op.report, bytes: counts.withUnsafeBytes { Array($0) })
                default:
                    return nil
                }
            }
            try boss.onInvalidation(on: loop) { _ in exit(0) }
            try PortCheckIn.checkIn(to: boss, from: port)
            try loop.run()
            return 0
        } catch {
            printError("portkit-bench port-echo: \(error)")
            return 1
        }
    }

    /// The `index`th name `name-filler` registers.
    static func fillerName(_ index: Int) -> String { "scale.\(index)" }

    /// `name-filler ADDRESS COUNT`: registers `fillerName(0)` … `fillerName(COUNT - 1)` at the
    /// name server at ADDRESS, all for one port served on a loop thread, prints `ready`, and
    /// holds them until its standard input ends.
    static func nameFiller(_ arguments: [String]) -> Int32 {
        guard arguments.count == 2, let count = Int(arguments[1]) else {
            printError("portkit-bench name-filler: usage: name-filler ADDRESS COUNT")
            return 2
        }
        do {
            let loop = try PortKitLoopThread(name: "bench-name-filler")
            let port = ReceivePort()
            try port.schedule(on: loop.loop) { request in Message(id: request.id, bytes: request.bytes) }
            let client = try NameServerClient.blockingConnect(to: arguments[0])
            for index in 0..<count { try client.blockingRegister(fillerName(index), port: port) }
            print("ready")
            fflush(nil)
            var byte: UInt8 = 0
            while true {
                let got = read(0, &byte, 1)
                guard got > 0 || (got < 0 && errno == EINTR) else { break }
            }
            client.close()
            port.invalidate()
            loop.shutDown()
            return 0
        } catch {
            printError("portkit-bench name-filler: \(error)")
            return 1
        }
    }

    // MARK: Raw baselines

    /// The descriptor a raw child gets its socket at (as `ChildWorker` does).
    static let channelDescriptor: CInt = 3

    /// `raw-echo`: reads from the socket at descriptor 3 and writes back what it read,
    /// with plain blocking `read` and `write`, until the parent closes.
    static func rawEcho() -> Int32 {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let got = buffer.withUnsafeMutableBytes { read(channelDescriptor, $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return 0 }
            guard buffer.withUnsafeBytes({ RawIO.writeAll(channelDescriptor, UnsafeRawBufferPointer(rebasing: $0[..<got])) }) else {
                return 0
            }
        }
    }

    /// `raw-sink [RECORD]`: for each run, reads an 8-byte count of the bytes that follow,
    /// reads and counts them, then acknowledges with the same 8-byte count; until the parent
    /// closes. Without RECORD the bytes go, in whatever pieces `read` returns, into one
    /// buffer used again; with it, each RECORD bytes into memory allocated for that record
    /// and freed once it is whole, as a receiver that hands each message over does.
    static func rawSink(record: Int?) -> Int32 {
        let reused = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
        defer { reused.deallocate() }
        while true {
            var expected: UInt64 = 0
            guard withUnsafeMutableBytes(of: &expected, { RawIO.readAll(channelDescriptor, $0) }) else { return 0 }
            var received: UInt64 = 0
            while received < expected {
                if let record {
                    let owned = UnsafeMutableRawBufferPointer.allocate(byteCount: record, alignment: 16)
                    defer { owned.deallocate() }
                    guard RawIO.readAll(channelDescriptor, owned) else { return 0 }
                    received += UInt64(record)
                    continue
                }
                let wanted = Int(min(UInt64(reused.count), expected - received))
                let got = read(channelDescriptor, reused.baseAddress, wanted)
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { return 0 }
                received += UInt64(got)
            }
            guard withUnsafeBytes(of: &received, { RawIO.writeAll(channelDescriptor, $0) }) else { return 0 }
        }
    }
}

/// Blocking reads and writes of whole buffers, for the raw baselines.
enum RawIO {
    /// Writes all of `bytes`; false when the peer is gone.
    static func writeAll(_ fd: CInt, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let wrote = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else { return false }
            offset += wrote
        }
        return true
    }

    /// Fills all of `buffer`; false when the peer closed first.
    static func readAll(_ fd: CInt, _ buffer: UnsafeMutableRawBufferPointer) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let got = read(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return false }
            offset += got
        }
        return true
    }
}

/// A child process of this executable, started with `posix_spawn` the way `ChildWorker`
/// starts one: `portkit-bench --child NAME ...`, given descriptors at 3, 4, ...
struct BenchProcess {
    /// The child's process id.
    let pid: pid_t

    /// This executable's path.
    static var executable: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self) : "/proc/self/exe"
    }

    /// Spawns `portkit-bench --child` with `arguments`, giving it `descriptors` at 3, 4, ...
    /// - Throws: `BenchmarkError.system` when `posix_spawn` fails.
    static func spawn(_ arguments: [String], descriptors: [CInt] = []) throws(BenchmarkError) -> BenchProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Every descriptor the parent made is close-on-exec; dup2 gives the child its copies
        // (the sources are above 2 + count, so no dup2 overwrites a later source).
        for (index, fd) in descriptors.enumerated() {
            precondition(fd > CInt(2 + descriptors.count), "descriptor \(fd) would be overwritten")
            posix_spawn_file_actions_adddup2(&actions, fd, CInt(3 + index))
        }
        let path = executable
        let argv = ([path, "--child"] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard status == 0 else { throw .system(operation: "posix_spawn \(path)", errno: status) }
        return BenchProcess(pid: pid)
    }

    /// Waits for the child to end; returns its raw wait status.
    @discardableResult
    func wait() -> CInt {
        var status: CInt = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }
}
