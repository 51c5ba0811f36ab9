import PermanentThread
import PortMessaging

/// A client's connection to its server, as a state machine:
///
/// ```
/// connected ──the connection closed (seen on the supervising loop)──▶ reconnecting
/// reconnecting ──a try connected and its hello was answered──▶ connected (a new connection)
/// any ──close(), deinit──▶ closed
/// ```
///
/// A client without a supervising loop never reconnects: its connection stays in
/// `connected` with a dead port, and calls fail with `connectionLost`.
enum ServerLink: Sendable {
    /// Requests go to `connection`.
    case connected(ServerConnection)
    /// The server went away; the supervising loop is trying to connect again. Calls fail
    /// with `serverUnavailable`.
    case reconnecting(lastPID: Int32)
    /// The client was closed.
    case closed(lastPID: Int32)

    /// The pid of the server connected to, as far as known without waiting (its hello's
    /// answer may not be in yet: `ServerConnection.knownPID`), or of the last one.
    var lastKnownPID: Int32 {
        switch self {
        case .connected(let connection): return connection.knownPID
        case .reconnecting(let pid), .closed(let pid): return pid
        }
    }
}

/// One connection to a server, and the answer to its hello.
struct ServerConnection: Sendable {
    /// The connection to the server's port.
    let port: SendPort
    /// The hello's answer: the server's pid, or why it refused.
    let greeting: ServerGreeting

    /// The server's pid as its hello said, or until that answer is in, its socket's.
    var knownPID: Int32 { greeting.knownPID ?? greeting.peerPID }
}
