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

/// A watch of a reconnecting client, which the client does not keep alive: the watch's
/// owner does.
struct WatchReference: Sendable {
    weak var events: WatchEvents?
}

/// A client, not kept alive by what refers to it (a watch's events).
struct ClientReference: Sendable {
    weak var client: NameServerClient?
}

/// What a reconnecting client's supervising loop keeps between two passes: the work in
/// progress, the next try's delay, and what wakes the next try (a timer, and a watch on
/// the address's directory).
struct Reconnection: Sendable {
    /// Whether the supervising loop is inside `pump` (a request's reply wait runs the
    /// loop, which may call it again: that call only sets `pending`).
    var running = false
    /// Whether something happened while `running`: the outer call looks again.
    var pending = false
    /// Whether the next pass should try to connect (the timer fired, the directory changed,
    /// or the server was just lost).
    var readyToTry = false
    /// The wait before the next try.
    var delay: Duration = .zero
    /// The timer of the next try.
    var timer: LoopTimer?
    /// The watch on the address's directory (or on its parent while it is missing), and
    /// its source on the supervising loop.
    var directory: DirectoryWatching?
    /// Watches whose server connection closed while the client's connection seemed up:
    /// resumed on the current connection (the server ended them, or is gone).
    var interrupted: [WatchEvents] = []

    /// A directory watch and its loop source.
    struct DirectoryWatching: Sendable {
        let watch: DirectoryWatch
        let source: DescriptorSource
        /// Whether the address's directory was missing and its parent is watched.
        let isParent: Bool
    }

    /// Takes the timer and the directory watch out, for the caller to end.
    mutating func takeWaiting() -> (LoopTimer?, DirectoryWatching?) {
        defer { timer = nil; directory = nil }
        return (timer, directory)
    }
}
