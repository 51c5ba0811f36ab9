import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

/// `tcp-flood PORT COUNT [BYTES]`: the attacker of a listener's limits, as a process of
/// its own. Holds COUNT connections to 127.0.0.1:PORT, each silent (or, with BYTES, having
/// sent the header of a frame of BYTES bytes and a few bytes of its body, nothing more:
/// a slow sender), and opens each again as soon as the listener closes it. Prints "holding COUNT" once
/// all are open, then "reopened N" every 2 seconds (the connections opened again so
/// far), until it is killed.
@Sendable func tcpFlood(_ arguments: [String]) -> Int32 {
    guard arguments.count >= 2, let port = UInt16(arguments[0]), let count = Int(arguments[1]), count > 0 else {
        say("usage: tcp-flood PORT COUNT [BYTES]")
        return 2
    }
    let bytes = arguments.count > 2 ? Int(arguments[2]) ?? 0 : 0
    guard let address = try? TCPSocket.resolve("127.0.0.1", port: port).first else {
        say("error: cannot resolve 127.0.0.1")
        return 1
    }
    let frame = bytes > 0 ? (try? WireCodec.encode(WireMessage(id: 1, components: [.bytes([UInt8](repeating: 0x50, count: bytes))]))) : nil
    let partial = frame.map { Array($0.prefix(WireLayout.headerSize + 8)) } ?? []
    func open() -> FileDescriptor? {
        guard let socket = try? TCPSocket.connect(to: address, deadline: .now + .seconds(30)) else { return nil }
        if !partial.isEmpty { _ = partial.withUnsafeBytes { send(socket.rawValue, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) } }
        return socket
    }
    var sockets: [FileDescriptor] = []
    while sockets.count < count {
        if let socket = open() { sockets.append(socket) }
    }
    say("holding \(count)")
    var reopened = 0
    var lastReport = ContinuousClock.now
    var polled = sockets.map { pollfd(fd: $0.rawValue, events: Int16(POLLIN), revents: 0) }
    while true {
        for index in polled.indices { polled[index].revents = 0 }
        _ = poll(&polled, nfds_t(polled.count), 200)
        var scratch = [UInt8](repeating: 0, count: 4096)
        for index in polled.indices where polled[index].revents != 0 {
            // The listener's bytes (a TLS alert, a limits frame) are read and dropped; its
            // close, or a reset, is answered with a new connection.
            let read = recv(polled[index].fd, &scratch, scratch.count, CInt(MSG_DONTWAIT))
            guard read <= 0, !(read < 0 && errno == EAGAIN) else { continue }
            try? sockets[index].close()
            guard let socket = open() else { continue }
            sockets[index] = socket
            polled[index].fd = socket.rawValue
            reopened += 1
        }
        if ContinuousClock.now - lastReport >= .seconds(2) {
            say("reopened \(reopened)")
            lastReport = .now
        }
    }
}

/// `unix-hello PATH`: a name server that dies before answering, as its clients see it.
/// Listens at PATH, prints "listening", accepts one connection, waits for its first bytes
/// (a client's hello), prints "hello", and then waits, unanswering, until it is killed.
@Sendable func unixHello(_ arguments: [String]) -> Int32 {
    guard let path = arguments.first else {
        say("usage: unix-hello PATH")
        return 2
    }
    do {
        let listener = try UnixSocket.make(nonBlocking: false)
        try UnixSocket.bind(listener, to: path)
        try UnixSocket.listen(listener, backlog: 16)
        say("listening")
        guard try listener.poll(CShort(POLLIN), timeout: nil) != 0, let accepted = try UnixSocket.accept(listener),
              try accepted.poll(CShort(POLLIN), timeout: nil) != 0
        else {
            say("error: no client")
            return 1
        }
        say("hello")
        while true { pause() }
    } catch {
        say("error \(error)")
        return 1
    }
}
