// portkit-bench-service: the smallest PortKit service the bench's names.activation starts
// on demand (no Foundation; PortKit's name client only). As a name server's activated
// service (PORTKIT_NAME_SERVER and PORTKIT_ACTIVATION_NAME set by the server), it
// registers the name with a port that answers each request with its bytes, and exits once
// the port has had no client for 50 ms. With PORTKIT_READY_FD=N it only writes one byte to
// descriptor N and exits: the floor, a spawn until the program runs.
import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging

if let ready = getenv("PORTKIT_READY_FD").flatMap({ Int32(String(cString: $0)) }) {
    var byte: UInt8 = 1
    _ = write(ready, &byte, 1)
    exit(0)
}
guard let name = getenv("PORTKIT_ACTIVATION_NAME").map({ String(cString: $0) }) else {
    _ = write(2, "portkit-bench-service: no PORTKIT_ACTIVATION_NAME\n", 51)
    exit(2)
}
do {
    let names = try NameServerClient.blockingConnect()
    let loop = ThreadLoop.current
    let port = ReceivePort()
    try port.schedule(on: loop) { request in Message(id: request.id, components: [.data(request.bytes)], replyPort: nil) }
    try names.blockingRegister(name, port: port).onIdle(after: .milliseconds(50)) { exit(0) }
    try loop.add(LoopSource(perform: {}), forMode: .default)
    withExtendedLifetime(names) {
        while true { _ = try? loop.run() }
    }
} catch {
    let line = "portkit-bench-service: \(error)\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
    exit(1)
}
