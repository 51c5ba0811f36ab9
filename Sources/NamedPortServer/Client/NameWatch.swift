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
    /// The names matching the prefix when the watch started, sorted by name.
    public let initialOwners: [NameOwner]
    private let sink: WatchSink
    private let cancelling: @Sendable () -> Void

    init(prefix: String, exact: Bool, initialOwners: [NameOwner], sink: WatchSink, cancel: @escaping @Sendable () -> Void) {
        self.prefix = prefix
        self.isExact = exact
        self.initialOwners = initialOwners
        self.sink = sink
        self.cancelling = cancel
    }

    deinit {
        cancelling()
    }

    /// The next event, waiting for it up to `timeout` (`nil`: for ever).
    /// - Returns: the event, or `nil` when the time is up or the watch was cancelled.
    /// - Throws: `connectionLost` once the connection to the server has ended (after the
    ///   events that came before the end), `limitExceeded` if more than
    ///   `WatchSink.maxQueuedEvents` events were left unread.
    public func next(timeout: Duration? = nil) throws(NameServerError) -> NameEvent? {
        try sink.next(deadline: timeout.map { ContinuousClock.now + $0 })
    }

    /// Ends the watch: the server stops sending its events, and `next` returns `nil`.
    public func cancel() {
        cancelling()
    }
}

/// Where a watch's events land, from the client's I/O thread, until `next` takes them.
final class WatchSink: Sendable {
    /// Unread events kept at most; past that the watch ends with `limitExceeded`.
    static let maxQueuedEvents = 100_000

    private struct State {
        var events: [NameEvent] = []
        var head = 0
        var end: NameServerError?
        var cancelled = false
    }

    private let state = ConditionLock(State())

    func deliver(_ event: NameEvent) {
        state.withLock { state in
            guard state.end == nil, !state.cancelled else { return }
            if state.events.count - state.head >= Self.maxQueuedEvents {
                state.end = .limitExceeded(what: "unread watch events", limit: Self.maxQueuedEvents)
                return
            }
            state.events.append(event)
        }
        state.broadcast()
    }

    func end(_ error: NameServerError) {
        state.withLock { state in
            if state.end == nil { state.end = error }
        }
        state.broadcast()
    }

    /// Marks the watch cancelled; returns whether it was not before.
    func markCancelled() -> Bool {
        let first = state.withLock { state -> Bool in
            defer { state.cancelled = true }
            return !state.cancelled
        }
        state.broadcast()
        return first
    }

    func next(deadline: ContinuousClock.Instant?) throws(NameServerError) -> NameEvent? {
        let outcome = state.wait(until: deadline) { state -> Result<NameEvent?, NameServerError>? in
            if state.cancelled { return .success(nil) }
            if state.head < state.events.count {
                let event = state.events[state.head]
                state.head += 1
                if state.head == state.events.count {
                    state.events.removeAll(keepingCapacity: state.events.capacity <= 1024)
                    state.head = 0
                }
                return .success(event)
            }
            if let end = state.end { return .failure(end) }
            return nil
        }
        return try (outcome ?? .success(nil)).get()
    }
}
