/// What `register` does when another connection holds the name (D-Bus's `RequestName`
/// flags, in PortKit's words).
public enum TakenNamePolicy: UInt64, Hashable, Sendable, CustomStringConvertible {
    /// Refuse: `register` throws `nameTaken` (the default, and the only behaviour of
    /// servers that predate the others).
    case fail = 0
    /// Wait behind the owner as a standby: `register` returns a registration whose state is
    /// `queued`, and which becomes `registered` when the owner goes (it unregisters, closes
    /// its client, its port dies or its process does), in the same pass of the server's
    /// loop that sees it go. Several standbys take over in the order they queued; one whose
    /// client or port goes first leaves the queue.
    case queue = 1
    /// Take the name from an owner that allowed it (`register(…, replaceable: true)`):
    /// that owner's registration ends as `takenByAnother`. An owner that did not allow it
    /// is `nameTaken`, as with `fail`.
    case replace = 2

    /// `fail`, `queue` or `replace`.
    public var description: String {
        switch self {
        case .fail: "fail"
        case .queue: "queue"
        case .replace: "replace"
        }
    }
}
