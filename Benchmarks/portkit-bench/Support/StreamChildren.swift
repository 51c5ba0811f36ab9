import CPortKitSystem
import Glibc
import PortMessaging

/// The PortKit child: `portkit-bench --child port-echo` spawned with `ChildWorker` over a
/// socket, checked in with a boss port served on the calling thread's loop — so a request
/// runs that loop until its reply is in, as the boss thread of the seeds does.
final class PortKitChild: Sendable {
    let worker: SendPort
    private let boss: ReceivePort
    private let child: ChildWorker

    init() throws {
        boss = ReceivePort()
        try boss.schedule(on: .current) { _ in nil }
        do {
            child = try ChildWorker.spawn(
                executable: BenchProcess.executable, arguments: ["--child", "port-echo"], bossPort: boss, channel: .socket)
        } catch {
            boss.invalidate()
            throw error
        }
        do {
            worker = try PortCheckIn.awaitWorker(on: boss, timeout: .seconds(30))
        } catch {
            boss.invalidate()
            child.kill(SIGKILL)
            child.wait()
            throw error
        }
    }

    /// Closes the connection (the child ends when it sees that) and waits for the child.
    func stop() {
        worker.invalidate()
        boss.invalidate()
        child.wait()
    }
}

/// A raw child (`raw-echo`, `raw-sink`) on a bare blocking socket pair.
final class RawChild: Sendable {
    private let socket: CInt
    private let child: BenchProcess

    /// Spawns the bench's child `arguments[0]` with `arguments` after it; with
    /// `passCredentials`, both ends of the socket pair pass credentials (SO_PASSCRED), as
    /// every PortKit socket does.
    init(_ arguments: [String], passCredentials: Bool = false) throws {
        var pair: (CInt, CInt) = (-1, -1)
        let made = withUnsafeMutableBytes(of: &pair) {
            socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, $0.baseAddress!.assumingMemoryBound(to: CInt.self))
        }
        guard made == 0 else { throw BenchmarkError.lastSystemError("socketpair") }
        defer { close(pair.1) }
        if passCredentials {
            var on: CInt = 1
            for end in [pair.0, pair.1] where setsockopt(end, SOL_SOCKET, SO_PASSCRED, &on, socklen_t(MemoryLayout<CInt>.size)) != 0 {
                let error = BenchmarkError.lastSystemError("setsockopt SO_PASSCRED")
                close(pair.0)
                throw error
            }
        }
        do {
            child = try BenchProcess.spawn(arguments, descriptors: [pair.1])
        } catch {
            close(pair.0)
            throw error
        }
        socket = pair.0
    }

    /// Writes all of `bytes` (`send` only to get EPIPE instead of SIGPIPE if the child died).
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let wrote = send(socket, bytes.baseAddress! + offset, bytes.count - offset, CInt(MSG_NOSIGNAL))
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else { throw BenchmarkError.lastSystemError("send to the raw child") }
            offset += wrote
        }
    }

    /// Fills `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws {
        guard RawIO.readAll(socket, buffer) else { throw BenchmarkError.lastSystemError("read from the raw child") }
    }

    /// Closes the socket (the child ends at end of file) and waits for the child.
    func stop() {
        close(socket)
        child.wait()
    }
}
