import Foundation
import Glibc
import PermanentThread
import PortKitSystem

/// A private etcd for the cluster cases: one member on free loopback ports, its data in a
/// temporary directory, killed and removed on `stop`. Without an `etcd` executable the
/// impls that need it are left out (`scripts/bench-setup.sh` installs `etcd-server`).
final class BenchEtcd: Sendable {
    let endpoint: String
    let clientPort: UInt16
    private let pid: pid_t
    private let directory: String

    init() throws {
        let candidates: [String] = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        guard let executable = candidates.first(where: { access($0, X_OK) == 0 }) else {
            throw BenchmarkError.notMeasurable("etcd is not installed (apt-get install etcd-server)")
        }
        directory = NSTemporaryDirectory() + "portkit-bench-etcd-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        clientPort = try Self.freePort()
        let peerPort = try Self.freePort()
        endpoint = "http://127.0.0.1:\(clientPort)"
        let peer = "http://127.0.0.1:\(peerPort)"
        let arguments = [
            executable, "--name", "bench", "--data-dir", directory, "--listen-client-urls", endpoint,
            "--advertise-client-urls", endpoint, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "bench=\(peer)", "--log-level", "error",
        ]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard status == 0 else { throw BenchmarkError.system(operation: "posix_spawn etcd", errno: status) }
        self.pid = pid
        // Ready once a range request is answered.
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            if let http = try? RawEtcdHTTP(port: clientPort), (try? http.post("/v3/kv/range", #"{"key":"cHJvYmU="}"#)) != nil { return }
            guard ContinuousClock.now < deadline else {
                stop()
                throw BenchmarkError.timedOut("etcd to answer on \(endpoint)")
            }
            usleep(20_000)  // paces the readiness probe; it synchronises nothing
        }
    }

    func stop() {
        kill(pid, SIGKILL)
        var status: CInt = 0
        waitpid(pid, &status, 0)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A loopback TCP port free now.
    private static func freePort() throws -> UInt16 {
        let addresses = try TCPSocket.resolve("127.0.0.1", port: 0)
        let (socket, port) = try TCPSocket.listen(at: addresses[0])
        try? socket.close()
        return port
    }
}

/// etcd's JSON gateway spoken by hand: blocking HTTP/1.1 on one kept TCP connection, the
/// least a client of the directory can do (`cluster.*`'s raw baselines).
final class RawEtcdHTTP: Sendable {
    private let socket: FileDescriptor

    init(port: UInt16) throws {
        let target = try TCPSocket.resolve("127.0.0.1", port: port)
        socket = try TCPSocket.connect(to: target[0], deadline: .now + .seconds(5))
        try socket.setNonBlocking(false)
    }

    /// Posts `body` to `path`; the response's body (its length from Content-Length).
    @discardableResult
    func post(_ path: String, _ body: String) throws -> String {
        try send(path, body)
        var received: [UInt8] = []
        while true {
            if let end = Self.headerEnd(received) {
                let header = String(decoding: received[..<end], as: UTF8.self).lowercased()
                guard let range = header.range(of: "content-length: "),
                    let length = Int(header[range.upperBound...].prefix { $0.isNumber })
                else { throw BenchmarkError.timedOut("a response with a length") }
                while received.count < end + 4 + length { try readSome(into: &received) }
                return String(decoding: received[(end + 4)..<(end + 4 + length)], as: UTF8.self)
            }
            try readSome(into: &received)
        }
    }

    /// Opens a watch of `key` (base64) with a streamed response: returns once etcd says
    /// it is created. `waitFor` then reads until a given text arrives.
    func startWatch(_ key: String) throws {
        try send("/v3/watch", #"{"create_request":{"key":"\#(key)"}}"#)
        _ = try waitFor(#""created":true"#)
    }

    /// Reads the stream until `text` has arrived in what this call read.
    func waitFor(_ text: String) throws -> String {
        var received: [UInt8] = []
        while true {
            try readSome(into: &received)
            let got = String(decoding: received, as: UTF8.self)
            if got.contains(text) { return got }
        }
    }

    func close() { try? socket.close() }

    private func send(_ path: String, _ body: String) throws {
        let request = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        let bytes = Array(request.utf8)
        guard bytes.withUnsafeBytes({ RawIO.writeAll(socket.rawValue, $0) }) else { throw BenchmarkError.lastSystemError("write to etcd") }
    }

    private func readSome(into received: inout [UInt8]) throws {
        var chunk = [UInt8](repeating: 0, count: 4096)
        let count = chunk.withUnsafeMutableBytes { read(socket.rawValue, $0.baseAddress, $0.count) }
        guard count > 0 else { throw BenchmarkError.lastSystemError("read from etcd") }
        received += chunk[..<count]
    }

    private static func headerEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4) where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }
}
