import PermanentThread

/// A watch on a name or a prefix: the owners there were when it started, then every
/// appearance and disappearance after that, in the order the server saw them.
///
/// The server takes the snapshot and starts the subscription in the same step, so no
/// change falls between `initialOwners` and the first event, and none is missed after.
/// Events queue up until `next(timeout:)` takes them.
public final class NameWatch: Sendable {
    /// The prefix watched (the empty string watches every name), or the name when `isExact`.
    public let prefix: String
    /// Whether the watch is on exactly the name `prefix` rather than on a prefix.
    public let isExact: Bool
    /// The names matching when the watch started, sorted by name.
    public let initialOwners: [NameOwner]
    private let id: UInt64
    private let connection: ClientConnection
    private let timeout: Duration
    private let cancelled = Locked(false)

    init(
        prefix: String, exact: Bool, initialOwners: [NameOwner], id: UInt64, connection: ClientConnection,
        timeout: Duration
    ) {
        self.prefix = prefix
        self.isExact = exact
        self.initialOwners = initialOwners
        self.id = id
        self.connection = connection
        self.timeout = timeout
    }

    deinit {
        cancel()
    }

    /// The next event, waiting for it up to `timeout` (`nil`: for ever).
    ///
    /// Events wait in a queue until taken (at most 100 000; past that the watch ends with
    /// `limitExceeded`). On a connection with no registered name the waiting caller reads
    /// the socket itself; otherwise the client's I/O thread delivers.
    /// - Returns: the event, or `nil` when the time is up or the watch was cancelled.
    /// - Throws: `connectionLost` once the connection to the server has ended (after the
    ///   events that came before the end), `limitExceeded` when too many were left unread.
    public func next(timeout: Duration? = nil) throws(NameServerError) -> NameEvent? {
        try connection.nextEvent(id, deadline: timeout.map { ContinuousClock.now + $0 })
    }

    /// Ends the watch: the server stops sending its events, and `next` returns `nil`.
    /// Safe to call more than once.
    public func cancel() {
        let first = cancelled.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        guard first else { return }
        connection.removeWatch(id)
        connection.requestWithoutWaiting(.unwatch, [NameField.integer(id)], deadline: .now + timeout)
    }
}
