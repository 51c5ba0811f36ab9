import Synchronization

/// The reply a request is owed: answer it once, from any thread, now or later (a server
/// that answers a lookup when its name appears). A `PendingReply` that goes away
/// unanswered fails the request with `PortError.noReply`, so a requester never waits for
/// a reply that will not come.
public final class PendingReply: Sendable {
    /// Where the reply goes.
    enum Target: Sendable {
        /// A request from this process: its waiting slot.
        case local(ReplySlot)
        /// A request from a peer: its connection and sequence number.
        case connection(Connection, UInt64)

        func send(_ reply: Message) {
            switch self {
            case .local(let slot): slot.fulfil(reply)
            case .connection(let connection, let sequence):
                // A reply that cannot go (too large, a port in it that cannot travel) still
                // ends the wait: the requester gets `noReply` at once, not its timeout.
                do {
                    try connection.sendReply(reply, sequence: sequence, timeout: ReceivePort.replySendTimeout)
                } catch let error where error != .sendTimedOut && error != .peerDied && error != .invalidPort {
                    connection.writeNoReply(sequence: sequence)
                } catch {}
            }
        }

        /// Sends `reply`, or throws (nothing sent) when it cannot be: too large, a port in it
        /// that cannot travel, the connection closed or, within `timeout`, full.
        func sendChecked(_ reply: Message, timeout: Duration) throws(PortError) {
            switch self {
            case .local(let slot): slot.fulfil(reply)
            case .connection(let connection, let sequence):
                try connection.sendReply(reply, sequence: sequence, timeout: timeout)
            }
        }

        func refuse() {
            switch self {
            case .local(let slot): slot.fail(.noReply)
            case .connection(let connection, let sequence): connection.writeNoReply(sequence: sequence)
            }
        }
    }

    private let target: Target
    private let answered = Atomic<Bool>(false)
    /// The id of the request this answers (a reply usually carries it back).
    public let requestID: UInt32

    init(_ target: Target, requestID: UInt32) {
        self.target = target
        self.requestID = requestID
    }

    /// Sends `reply` to the requester; false (and nothing sent) when it was answered already.
    /// A requester that stopped waiting (its receive timeout passed) drops it.
    @discardableResult
    public func reply(_ reply: Message) -> Bool {
        guard take() else { return false }
        target.send(reply)
        return true
    }

    /// Sends `reply` to the requester, or throws and sends nothing, leaving the request to
    /// be answered otherwise: `messageTooLarge`, `tooManyComponents`, a port in it that
    /// cannot travel (`invalidPort`, `peerDied` for a connection whose peer is gone,
    /// `system` when no socket pair can be made), `peerDied` (the requester is gone),
    /// `sendTimedOut` (its connection took nothing within `timeout`; with `.zero`, from a
    /// loop's thread, only once the connection's queue is full). Throws `noReply` when the
    /// request was answered already.
    public func answer(_ reply: Message, timeout: Duration = ReceivePort.replySendTimeout) throws(PortError) {
        guard take() else { throw .noReply }
        do {
            try target.sendChecked(reply, timeout: timeout)
        } catch {
            answered.store(false, ordering: .releasing)
            throw error
        }
    }

    /// Tells the requester no reply will come (it fails with `PortError.noReply`) without
    /// waiting for this object to go away; false when it was answered already.
    @discardableResult
    public func refuse() -> Bool {
        guard take() else { return false }
        target.refuse()
        return true
    }

    /// Whether a reply (or a refusal) was sent.
    public var isAnswered: Bool { answered.load(ordering: .acquiring) }

    private func take() -> Bool {
        !answered.exchange(true, ordering: .acquiringAndReleasing)
    }

    deinit { if take() { target.refuse() } }
}
