import PermanentThread
import PortMessaging
import PortKitSystem

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
