import Glibc
import PortKitSystem

/// What can go wrong when using a `PermanentThread` or a `StallMonitor`.
///
/// Work is never dropped without one of these: a block that cannot be accepted makes
/// the call that offered it throw.
public enum PermanentThreadError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The thread was stopped (or is stopping): it takes no more blocks. Every block
    /// accepted before `stop()` still runs.
    case stopped
    /// A synchronous call (or a stall monitor) needs a running thread, and `run()` has not
    /// been called yet. (Asynchronous `execute` and `submit` before `run()` are queued.)
    case notStarted
    /// The operating system refused to create the thread (`pthread_create`; `EAGAIN`: too
    /// many threads or not enough memory, `EINVAL`: a stack size below the minimum).
    case system(SystemCallError)
    /// The task awaiting `submit` was cancelled before the block started: the block never
    /// runs. (Once it has started, it runs to its end and its result is returned.)
    case cancelledBeforeStart
    /// The thread's run loop refused an operation (it could not be made, or a monitor's
    /// observer could not be added to it).
    case loop(ThreadLoopError)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .stopped: "the permanent thread is stopped and takes no more work"
        case .notStarted: "the permanent thread has not been started (call run() first)"
        case .system(let failure): "\(failure)"
        case .cancelledBeforeStart: "the awaiting task was cancelled before the block started"
        case .loop(let error): "run loop: \(error)"
        }
    }
}
