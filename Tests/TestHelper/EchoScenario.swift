import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging

/// `names-echo ADDRESS NAME`: registers NAME with a port that answers each request with
/// one bytes component — the request's first bytes, then what each descriptor it carried
/// reads from its start (up to 64 KiB each) — and the request's descriptors sent back, in
/// order. Prints "serving NAME PID", then "message ID SIZE" for each one-way message;
/// serves until killed.
@Sendable func namesEcho(_ arguments: [String]) -> Int32 {
    guard arguments.count == 2 else { return usage("names-echo ADDRESS NAME") }
    do {
        let client = try NameServerClient.blockingConnect(to: arguments[0])
        let loop = ThreadLoop.current
        let port = ReceivePort()
        try port.schedule(on: loop, inModes: [.default]) { message, pending in
            defer { for fd in message.descriptors { close(fd) } }
            guard let pending else { return say("message \(message.id) \(message.bytes.count)") }
            var bytes = message.bytes
            for fd in message.descriptors {
                var chunk = [UInt8](repeating: 0, count: 65_536)
                let count = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
                if count > 0 { bytes += chunk[..<count] }
            }
            let reply = Message(id: message.id, components: [.data(bytes)] + message.descriptors.map { .descriptor($0) })
            _ = pending.reply(reply)
        }
        try serveUntilKilled(client, arguments[1], port: port, on: loop)
    } catch {
        say("error \(error)")
        return 1
    }
}

/// Registers `name` for `port`, prints "serving NAME PID", and runs `loop` (the port's)
/// until the process is killed.
func serveUntilKilled(
    _ client: NameServerClient, _ name: String, port: ReceivePort, scope: NameScope = .host, on loop: ThreadLoop
) throws -> Never {
    try client.blockingRegister(name, port: port, scope: scope)
    say("serving \(name) \(getpid())")
    try serveForever(loop, keeping: client)
}
