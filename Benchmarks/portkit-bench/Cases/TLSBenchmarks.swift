import Glibc
import PortCluster
import PortMessaging
import PortKitSystem

/// Ports over loopback TCP secured by the cluster's TLS against a TLS exchange with no
/// port around it, both with a thread of this process at the far end.
enum TLSBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        [tlsRoundTrip(count: scale.count(2000, quick: 100))]
    }

    /// `port.tls.roundtrip`: the median time of a 64-byte request and its 64-byte reply to a
    /// port listening on 127.0.0.1 secured by `ClusterTLS` (TLS 1.3, both sides
    /// certified), served on another thread; the raw baseline sends 64 bytes through the
    /// same TLS (an OpenSSL `SSL` per side, with `ClusterTLS`'s stream, on a connected
    /// loopback socket) and reads them back from a thread that echoes them.
    static func tlsRoundTrip(count: Int) -> BenchmarkCase {
        let size = 64
        return BenchmarkCase(name: "port.tls.roundtrip", unit: "µs", impls: [
            TCPBenchmarks.servedPort("portkit", thread: "bench-tls-port", size: size, count: count) {
                let certificates = try BenchCertificates.make()
                do {
                    let (server, client) = try securities(certificates)
                    return (.secured(by: server), .secured(by: client), { certificates.remove() })
                } catch {
                    certificates.remove()
                    throw error
                }
            },
            rawEcho("raw", size: size, relayed: false, count: count),
        ])
    }

    /// A raw TLS echo of `size` bytes (`RawTLSEcho`), relayed or not, as impl `name`: the
    /// baseline of `port.tls.roundtrip` and of `cluster.call`.
    static func rawEcho(_ name: String, size: Int, relayed: Bool, count: Int) -> BenchmarkImpl {
        BenchmarkImpl(name) {
            let certificates = try BenchCertificates.make()
            defer { certificates.remove() }
            let (server, client) = try securities(certificates)
            let echo = try RawTLSEcho(size: size, server: server, client: client, relayed: relayed)
            var buffer = PortBenchmarks.payload(size)
            return .init(
                measure: {
                    try PortBenchmarks.medianMicroseconds(count) {
                        try buffer.withUnsafeMutableBytes { bytes in try echo.roundTrip(bytes) }
                    }
                },
                stop: echo.stop)
        }
    }

    /// The server's and the client's `ClusterTLS`, from `certificates`.
    static func securities(_ certificates: BenchCertificates) throws -> (ClusterTLS, ClusterTLS) {
        let server = certificates.node("server")
        let client = certificates.node("client")
        return (
            try ClusterTLS(certificate: server.certificate, privateKey: server.privateKey, authority: certificates.authority),
            try ClusterTLS(certificate: client.certificate, privateKey: client.privateKey, authority: certificates.authority)
        )
    }
}

/// The raw baseline: a connected pair of loopback TCP sockets (`TCP_NODELAY`, non-blocking),
/// a TLS stream on each, the far one echoed by a thread; each side waits with `poll` when
/// its stream would block.
final class RawTLSEcho: @unchecked Sendable {
    // @unchecked: `room` is used by the measuring thread alone (in `roundTrip`), and freed
    // in `deinit`; everything else is immutable and Sendable.
    private let client: FileDescriptor
    private let far: FileDescriptor
    private let clientStream: any SecuredStream
    private let thread: PosixThread
    private let relay: RawRelay?
    /// Where the client's reads go: a stream's read needs a whole record's room.
    private let room = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)

    /// With `relayed`, the echoing thread passes each message over a Unix socket pair to a
    /// second thread, which echoes it back, before it answers (the floor of a relay).
    init(size: Int, server: ClusterTLS, client clientSecurity: ClusterTLS, relayed: Bool = false) throws {
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
        clientStream = try clientSecurity.secure(socket: client.rawValue, as: .connecting(host: "127.0.0.1"))
        let farStream = try server.secure(socket: far.rawValue, as: .accepting)
        // Both handshakes, stepped in turn on this thread.
        var done = (client: false, far: false)
        let deadline = ContinuousClock.now + .seconds(10)
        while !(done.client && done.far) {
            for (stream, isClient) in [(clientStream, true), (farStream, false)] where !(isClient ? done.client : done.far) {
                switch stream.handshake() {
                case .complete: if isClient { done.client = true } else { done.far = true }
                case .wantsReadable, .wantsWritable: break
                case .failed(let reason): throw BenchmarkError.notMeasurable("TLS handshake: \(reason)")
                }
            }
            if ContinuousClock.now > deadline { throw BenchmarkError.timedOut("TLS handshake") }
        }
        let socket = far.rawValue
        relay = relayed ? try RawRelay(size: size) : nil
        let relay = self.relay
        thread = try PosixThread.start(name: "bench-tls-echo") {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 64 * 1024), alignment: 16)
            defer { buffer.deallocate() }
            while RawTLSIO.read(farStream, socket, into: buffer, count: size) {
                let message = UnsafeMutableRawBufferPointer(rebasing: buffer[..<size])
                if let relay, !relay.pass(message) { break }
                guard RawTLSIO.write(farStream, socket, UnsafeRawBufferPointer(message)) else { break }
            }
        }
    }

    /// Writes `bytes` and reads the echo back into them.
    func roundTrip(_ bytes: UnsafeMutableRawBufferPointer) throws {
        guard RawTLSIO.write(clientStream, client.rawValue, UnsafeRawBufferPointer(bytes)),
            RawTLSIO.read(clientStream, client.rawValue, into: room, count: bytes.count)
        else {
            throw BenchmarkError.timedOut("raw TLS round trip")
        }
        bytes.copyMemory(from: UnsafeRawBufferPointer(rebasing: room[..<bytes.count]))
    }

    deinit { room.deallocate() }

    func stop() {
        // The echo thread reads the end of the stream and returns.
        client.shutdown()
        thread.join()
        try? client.close()
        try? far.close()
        relay?.stop()
    }
}

/// Whole reads and writes on a secured stream over a non-blocking socket, waiting with
/// `poll` when it would block.
enum RawTLSIO {
    /// Writes all of `bytes`; false when the stream ended or broke.
    static func write(_ stream: any SecuredStream, _ socket: CInt, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            switch stream.write(UnsafeRawBufferPointer(rebasing: bytes[offset...])) {
            case .transferred(let count): offset += count
            case .wouldBlock: wait(socket, CShort(POLLOUT))
            case .closed, .failed: return false
            }
        }
        return true
    }

    /// Reads `count` bytes into `buffer`, which has a record's room beyond them; false
    /// when the stream ended.
    static func read(_ stream: any SecuredStream, _ socket: CInt, into buffer: UnsafeMutableRawBufferPointer, count: Int) -> Bool {
        var offset = 0
        while offset < count {
            switch stream.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[offset...])) {
            case .transferred(let got): offset += got
            case .wouldBlock: wait(socket, CShort(POLLIN))
            case .closed, .failed: return false
            }
        }
        return true
    }

    private static func wait(_ socket: CInt, _ events: CShort) {
        var entry = pollfd(fd: socket, events: events, revents: 0)
        _ = poll(&entry, 1, 10_000)
    }
}
