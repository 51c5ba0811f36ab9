import PortKitSystem

/// What can go wrong when using a run loop. Every case is a misuse or a fault the caller
/// can act on; nothing is dropped without one of these.
public enum ThreadLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A run, or another call that must happen on the loop's own thread, came from another thread.
    case notOnLoopThread
    /// The loop's thread has ended, or the loop stopped taking work (a stopped permanent thread).
    case loopEnded
    /// The timer, observer or source already belongs to another loop.
    case scheduledOnAnotherLoop
    /// The timer, observer or source was invalidated.
    case invalidated
    /// The descriptor is already watched by another source of this loop.
    case descriptorAlreadyWatched(CInt)
    /// A system call the loop made failed (its poller could not be made, a descriptor
    /// could not be watched).
    case system(SystemCallError)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .notOnLoopThread: "this must be called on the loop's own thread"
        case .loopEnded: "the loop's thread has ended or no longer takes work"
        case .scheduledOnAnotherLoop: "the item is already scheduled on another loop"
        case .invalidated: "the item was invalidated"
        case .descriptorAlreadyWatched(let fd): "descriptor \(fd) is already watched by a source of this loop"
        case .system(let failure): "\(failure)"
        }
    }

    init(_ operation: String, _ errno: Errno) {
        self = .system(SystemCallError(operation, errno))
    }
}
