import Foundation
import PermanentThread
import PortKitTestSupport
import PortMessaging

/// A receive port on a loop thread of its own, listening on a TCP address at a port the
/// kernel chose with `security`, recording what its handler received and its peers' events.
final class SecuredServer: Sendable {
    let port = ReceivePort()
    let thread = LoopThread.runningDefaultMode(name: "secured-server", limit: .seconds(600))
    let received = Recorder<Message>()
    let events = Recorder<PeerEvent>()
    /// The port it listens on.
    let number: UInt16

    /// Listens at `host` with `security`, answering with `reply` (nil: no reply).
    init(
        security: TCPSecurity, host: String = "127.0.0.1",
        reply: @escaping @Sendable (Message) -> Message? = { Message(id: $0.id, text: "answer to \($0.text)") }
    ) throws {
        let received = self.received
        let events = self.events
        port.onPeerEvent { events.append($0) }
        try port.listen(at: .tcp(host: host, port: 0), security: security)
        guard case .tcp(_, let chosen)? = port.listeningAddress, chosen != 0 else {
            throw PortError.noListener("the listening address names no chosen port")
        }
        number = chosen
        try port.schedule(on: thread.loop) { message in
            received.append(message)
            return reply(message)
        }
    }

    /// Where to connect: 127.0.0.1 at its port.
    var address: PortAddress { .tcp(host: "127.0.0.1", port: number) }

    /// The peers that connected, in order.
    var peers: [PortPeer] { events.all.compactMap { if case .connected(let peer) = $0 { peer } else { nil } } }

    /// Stops listening and serving.
    func stop() {
        port.invalidate()
        thread.loop.stop()
        _ = thread.join()
    }
}
