import Glibc
import PortMessaging
import PortKitSystem

/// Ports over loopback TCP against a raw TCP exchange, both with a thread of this process
/// at the far end.
enum TCPBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        [tcpRoundTrip(count: scale.count(2000, quick: 100))]
    }

    /// `port.tcp.roundtrip`: the median time of a 64-byte request and its 64-byte reply to
    /// a port listening on 127.0.0.1, served on another thread; the raw baseline writes 64
    /// bytes on a connected TCP socket (`TCP_NODELAY`) and reads them back from a thread
    /// that echoes with blocking reads and writes.
    static func tcpRoundTrip(count: Int) -> BenchmarkCase {
        let size = 64
        return BenchmarkCase(name: "port.tcp.roundtrip", unit: "µs", impls: [
            servedPort("portkit", thread: "bench-tcp-port", size: size, count: count) { (.plainLoopbackOnly, .plainLoopbackOnly, {}) },
            BenchmarkImpl("raw") {
                let echo = try RawTCPEcho(size: size)
                var buffer = PortBenchmarks.payload(size)
                return .init(
                    measure: {
                        try PortBenchmarks.medianMicroseconds(count) {
                            try buffer.withUnsafeMutableBytes { bytes in try echo.roundTrip(bytes) }
                        }
                    },
                    stop: echo.stop)
            },
        ])
    }

    /// A `size`-byte request/reply impl against an echoing port listening on 127.0.0.1, served
    /// on a thread named `thread`: `securities` gives the listener's and the caller's
    /// security, and what to clean up once the impl stops (the TLS case's certificates).
    static func servedPort(
        _ name: String, thread: String, size: Int, count: Int,
        securities: @escaping () throws -> (listening: TCPSecurity, connecting: TCPSecurity, cleanUp: @Sendable () -> Void)
    ) -> BenchmarkImpl {
        let request = Message(id: 1, bytes: PortBenchmarks.payload(size))
        return BenchmarkImpl(name) {
            let (listening, connecting, cleanUp) = try securities()
            let served: ServedPort
            do { served = try ServedPort(name: thread, handler: PortBenchmarks.echo) } catch {
                cleanUp()
                throw error
            }
            do {
                try served.port.listen(at: .tcp(host: "127.0.0.1", port: 0), security: listening)
                guard let address = served.port.listeningAddress else { throw BenchmarkError.timedOut("no listening address") }
                let port = try SendPort.connect(to: address, security: connecting)
                return .init(
                    measure: { try PortBenchmarks.medianRequestMicroseconds(count, request, to: port, size: size) },
                    stop: {
                        port.invalidate()
                        served.stop()
                        cleanUp()
                    })
            } catch {
                served.stop()
                cleanUp()
                throw error
            }
        }
    }
}

/// The raw baseline: a connected pair of loopback TCP sockets, blocking, with
/// `TCP_NODELAY`, the far one echoed by a thread that reads and writes whole buffers.
private final class RawTCPEcho: Sendable {
    private let client: FileDescriptor
    private let far: FileDescriptor
    private let thread: PosixThread

    init(size: Int) throws {
        let addresses = try TCPSocket.resolve("127.0.0.1", port: 0)
        let (listener, port) = try TCPSocket.listen(at: addresses[0])
        defer { try? listener.close() }
        let target = try TCPSocket.resolve("127.0.0.1", port: port)
        client = try TCPSocket.connect(to: target[0], deadline: .now + .seconds(10))
        var accepted: FileDescriptor?
        for _ in 0..<1000 where accepted == nil {
            _ = try listener.poll(CShort(POLLIN), timeout: .seconds(10))
            accepted = try TCPSocket.accept(listener)
        }
        guard let accepted else { throw BenchmarkError.timedOut("no accepted connection") }
        far = accepted
        try client.setNonBlocking(false)
        try far.setNonBlocking(false)
        let echoed = far.rawValue
        thread = try PosixThread.start(name: "bench-tcp-echo") {
            var buffer = [UInt8](repeating: 0, count: size)
            while buffer.withUnsafeMutableBytes({ RawIO.readAll(echoed, $0) && RawIO.writeAll(echoed, UnsafeRawBufferPointer($0)) }) {}
        }
    }

    /// Writes `bytes` and reads the echo back into them.
    func roundTrip(_ bytes: UnsafeMutableRawBufferPointer) throws {
        guard RawIO.writeAll(client.rawValue, UnsafeRawBufferPointer(bytes)), RawIO.readAll(client.rawValue, bytes) else {
            throw BenchmarkError.lastSystemError("raw TCP round trip")
        }
    }

    func stop() {
        // The echo thread reads end of file and returns.
        try? client.close()
        thread.join()
        try? far.close()
    }
}
