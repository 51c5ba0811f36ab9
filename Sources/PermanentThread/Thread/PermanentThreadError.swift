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
    /// The operating system refused to create the thread; `errno` says why (`EAGAIN`: too
    /// many threads or not enough memory, `EINVAL`: a stack size below the minimum).
    case threadCreationFailed(errno: CInt)
    /// The thread's run loop refused an operation (it could not be made, or a monitor's
    /// observer could not be added to it).
    case loop(ThreadLoopError)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .stopped: "the permanent thread is stopped and takes no more work"
        case .notStarted: "the permanent thread has not been started (call run() first)"
        case .threadCreationFailed(let errno): "pthread_create failed: \(Errno(rawValue: errno))"
        case .loop(let error): "run loop: \(error)"
        }
    }
}
