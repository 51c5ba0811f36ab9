// libFuzzer target for the name protocol: its field decoders, and a real name server's
// request handling. Built by scripts/fuzz-names.sh, which compiles the PortKitLocks,
// PortKitSystem, PermanentThread, PortMessaging and NamedPortServer sources with swiftc
// (not SwiftPM: SwiftPM cannot link a -sanitize=fuzzer executable, see docs/WIRE.md).
//
// Each input is sent, with descriptors attached, through a real socket into a name server
// running in this process, and its fields go through the decoders. A refusal is a correct
// answer; what must never happen is a trap, a leaked descriptor, a server that stops
// answering or keeps what a closed connection held. Only those trap here.
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitLocks
import PortKitSystem
import PortMessaging

/// The server every input talks to, and a client that checks it still answers.
private struct Harness {
    let server: NameServer
    let control: NameServerClient
    /// The loop of the control's port, where connections brokered to it live and end.
    let portThread: PermanentThread
    let address: String
    /// The server's counts with no fuzz connection open.
    let baseline: NameServerCounts
    var inputs = 0
}

private let harness = Locked<Harness?>(nil)

private func invariant(_ condition: Bool, _ what: @autoclosure () -> String) {
    if !condition { fatalError("name protocol invariant broken: \(what())") }
}

private func makeHarness() -> Harness {
    var template = Array("/tmp/fuzz-names-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    invariant(made != nil, "mkdtemp: \(errno)")
    let directory = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
    let address = directory + "/names.sock"
    // Small limits, so short inputs reach them.
    let policy = NameServerPolicy(maxNamesPerConnection: 4, maxWatchesPerConnection: 4, maxWaitingLookupsPerConnection: 4)
    do {
        let server = try NameServer.start(at: address, policy: policy)
        let control = try NameServerClient.blockingConnect(to: address)
        let portThread = PermanentThread(name: "fuzz.port")
        try portThread.run()
        let port = ReceivePort()
        try port.schedule(on: portThread.loop!) { request in request }
        try control.blockingRegister("fuzz.owner", port: port)
        return Harness(
            server: server, control: control, portThread: portThread, address: address, baseline: try server.counts())
    } catch {
        fatalError("cannot start the fuzzed name server: \(error)")
    }
}

/// libFuzzer's entry point.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: data == nil ? 0 : size))
    guard !input.isEmpty else { return 0 }
    // First byte: bit 0 chooses raw bytes or requests built from the rest; bits 1-2 the
    // descriptors sent with the first byte; the rest where to cut the stream in two.
    let mode = input[0]
    let descriptorCount = Int(mode >> 1) & 3
    let body = (mode & 1) == 0 ? Array(input.dropFirst()) : requests(from: input.dropFirst())
    let cut = body.isEmpty ? 0 : Int(mode >> 3) % (body.count + 1)
    checkFields(body)
    harness.withLock { state in
        if state == nil { state = makeHarness() }
        checkServer(body, cut: cut, descriptors: descriptorCount, &state!)
    }
    return 0
}

/// Requests built from bytes: per request [operation][field count] (the operations, and
/// 0 and 11, which are none), then per field a length byte and that many bytes (0xFF: a
/// port, sent with a socket; 0xFE: the next 8 bytes as an integer). Always preceded by a
/// hello, so the server takes later versions.
private func requests(from bytes: ArraySlice<UInt8>) -> [UInt8] {
    let version = withUnsafeBytes(of: nameProtocolVersion.littleEndian) { Array($0) }
    var stream = (try? WireCodec.encode(WireMessage(
        kind: .request, id: NameOperation.hello.rawValue, sequence: 0, components: [.bytes(version)]))) ?? []
    var rest = bytes
    var sequence: UInt64 = 1
    while let operation = rest.popFirst(), let count = rest.popFirst() {
        var components: [WireComponent] = []
        var ports = 0
        for _ in 0..<(count % 5) {
            guard let length = rest.popFirst() else { break }
            switch length {
            case 0xFF:
                components.append(.port(index: ports))
                ports += 1
            case 0xFE:
                components.append(.bytes(Array(rest.prefix(8))))
                rest = rest.dropFirst(8)
            default:
                components.append(.bytes(Array(rest.prefix(Int(length)))))
                rest = rest.dropFirst(Int(length))
            }
        }
        let message = WireMessage(kind: .request, id: UInt32(operation % 12), sequence: sequence, components: components)
        sequence += 1
        if let frame = try? WireCodec.encode(message) { stream += frame }
    }
    return stream
}

/// Sends `bytes` in two writes (cut at `cut`), with the first `descriptors` sockets, each
/// one end of a socket pair; returns the other ends, which see a hang-up once every copy
/// of what was sent is closed.
private func send(_ bytes: [UInt8], cut: Int, descriptors: Int, to socket: FileDescriptor) -> [FileDescriptor] {
    var extra: [CInt] = []
    var peers: [FileDescriptor] = []
    for _ in 0..<descriptors {
        if let (sent, peer) = try? FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: true) {
            extra.append(sent.rawValue)
            peers.append(peer)
        }
    }
    // Ours are closed once sent: the copies in flight are the receiver's.
    defer { for fd in extra { Glibc.close(fd) } }
    let first = Array(bytes[..<cut]), second = Array(bytes[cut...])
    if !first.isEmpty || !extra.isEmpty {
        _ = (first.isEmpty ? [0] : first).withUnsafeBytes { raw in
            Result { () throws(Errno) in try socket.send(raw, descriptors: extra) }
        }
    }
    if !second.isEmpty { _ = second.withUnsafeBytes { raw in Result { () throws(Errno) in try socket.send(raw) } } }
    return peers
}

/// Checks that every copy of the sent descriptors was closed, waiting up to `timeout` for
/// another thread to close them, then closes the peers.
private func expectReleased(_ peers: [FileDescriptor], within timeout: Duration, _ who: String) {
    for peer in peers {
        let events = (try? peer.poll(CShort(POLLHUP), timeout: timeout)) ?? 0
        invariant(events & CShort(POLLHUP) != 0, "\(who) kept a descriptor it was sent")
        try? peer.close()
    }
}

/// The field decoders on the input's bytes as fields: they decode or fail with an error.
private func checkFields(_ bytes: [UInt8]) {
    let components: [MessageComponent] = stride(from: 0, to: bytes.count, by: 16).map {
        .data(Array(bytes[$0..<min($0 + 16, bytes.count)]))
    }
    var fields = NameFieldReader([.data(bytes)])
    _ = try? fields.owners()
    var more = NameFieldReader(components)
    _ = try? more.string()
    _ = try? more.integer()
    _ = NameReply.decode(status: UInt32(bytes.first ?? 0) % 12, components, address: "fuzz")
}

/// Frames read from a socket, cut apart as they come.
private struct FrameReader {
    var splitter = WireFrameSplitter()

    /// What one read brings: the frames it completes, and whether the stream ended.
    mutating func read(from socket: FileDescriptor) -> (frames: [WireMessage], ended: Bool) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(socket.rawValue, $0.baseAddress, $0.count) }
        guard count > 0 else { return ([], true) }
        splitter.append(Array(buffer.prefix(count)))
        var frames: [WireMessage] = []
        while let frame = try? splitter.nextFrame() {
            let message = frame.withUnsafeBytes { raw -> WireMessage? in
                guard let header = try? WireHeader.parse(raw, limits: .default) else { return nil }
                return try? WireCodec.decode(raw, header: header, descriptorCount: header.descriptorCount)
            }
            guard let message else {
                return (frames, true)
            }
            frames.append(message)
        }
        return (frames, false)
    }
}

/// The input as a client of the real server: it must answer or close, never hang, and once
/// the connection is gone hold nothing for it; every 64 inputs the control client is
/// answered and the server's counts are back to the baseline.
private func checkServer(_ bytes: [UInt8], cut: Int, descriptors: Int, _ state: inout Harness) {
    guard let socket = try? UnixSocket.make(nonBlocking: false) else { return }
    defer { try? socket.close() }
    guard (try? UnixSocket.connect(socket, to: state.address)) != nil else { fatalError("the server stopped accepting") }
    let peers = send(bytes, cut: cut, descriptors: descriptors, to: socket)
    _ = Glibc.shutdown(socket.rawValue, CInt(SHUT_WR))
    // The server reads the end of our half and closes the connection.
    var reader = FrameReader()
    let deadline = ContinuousClock.now + .seconds(20)
    var closed = false
    while !closed && ContinuousClock.now < deadline {
        guard (try? socket.poll(CShort(POLLIN), timeout: .seconds(1))) ?? 0 != 0 else { continue }
        let (frames, ended) = reader.read(from: socket)
        for frame in frames {
            // Replies (a port in one is never sent to a client that asked for none), the
            // port's limit, and refusals to answer.
            invariant([.reply, .limits, .noReply].contains(frame.kind), "the server sent a \(frame.kind)")
        }
        closed = ended
    }
    invariant(closed, "the server kept a connection whose client had finished")
    // A port it took goes when the connection does.
    expectReleased(peers, within: .seconds(20), "the server")
    state.inputs += 1
    guard state.inputs % 64 == 0 else { return }
    do {
        invariant(try state.control.blockingOwner(of: "fuzz.owner").pid == getpid(), "the control name changed owner")
    } catch {
        fatalError("the server stopped answering: \(error)")
    }
    let server = state.server, baseline = state.baseline
    let settled = (0..<2000).contains { _ in
        if (try? server.counts()) == baseline { return true }
        usleep(1000)
        return false
    }
    invariant(settled, "the server holds more than its baseline: \(String(describing: try? server.counts())) vs \(baseline)")
}
