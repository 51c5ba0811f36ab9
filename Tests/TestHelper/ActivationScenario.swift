import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging

/// `names-activated LOG [--idle SECONDS] [--exit STATUS] [--hang]`: a service a name
/// server starts on demand. Appends "start PID" to LOG (one `write` with `O_APPEND`, so
/// concurrent starts each leave a line), then: `--exit STATUS` exits with STATUS at once;
/// `--hang` waits for a signal without registering; otherwise connects to the server
/// named by `PORTKIT_NAME_SERVER`, registers the name in `PORTKIT_ACTIVATION_NAME` with a
/// port that answers each request with "PID TEXT", and with `--idle` exits 0 once the
/// port has had no client for SECONDS.
@Sendable func namesActivated(_ arguments: [String]) -> Int32 {
    guard let log = arguments.first else { return usage("names-activated LOG [--idle SECONDS] [--exit STATUS] [--hang]") }
    let pid = getpid()
    let line = Array("start \(pid)\n".utf8)
    let descriptor = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
    guard descriptor >= 0, write(descriptor, line, line.count) == line.count else { return 1 }
    close(descriptor)
    if let status = option("--exit", arguments).flatMap({ Int32($0) }) { return status }
    if arguments.contains("--hang") {
        while true { pause() }
    }
    guard let name = getenv("PORTKIT_ACTIVATION_NAME").map({ String(cString: $0) }) else { return 1 }
    do {
        let client = try NameServerClient.blockingConnect()
        let loop = ThreadLoop.current
        let port = ReceivePort()
        try port.schedule(on: loop) { request in
            Message(id: request.id, components: [.data(Array("\(pid) ".utf8) + request.bytes)], replyPort: nil)
        }
        let registration = try client.blockingRegister(name, port: port)
        if let idle = option("--idle", arguments).flatMap(Double.init) {
            try registration.onIdle(after: .milliseconds(Int64(idle * 1000))) { exit(0) }
        }
        try serveForever(loop, keeping: client)
    } catch {
        say("error \(error)")
        return 1
    }
}

/// Runs `loop` until the process is killed, keeping `client` (and its names) alive.
func serveForever(_ loop: ThreadLoop, keeping client: NameServerClient) throws -> Never {
    try loop.add(LoopSource(perform: {}), forMode: .default)
    while true { withExtendedLifetime(client) { _ = try? loop.run() } }
}

/// The value after `flag` in `arguments`, if any.
private func option(_ flag: String, _ arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: flag), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}
