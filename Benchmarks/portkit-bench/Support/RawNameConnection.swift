import CPortKitSystem
import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitSystem

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
