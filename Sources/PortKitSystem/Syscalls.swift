import CPortKitSystem
import Glibc
import Synchronization

// Every raw system call of the package that touches descriptors goes through this file,
// so that error handling, EINTR and the fault seam live in one place.

/// The system calls the System layer wraps, as the fault seam (`FaultSeam`) names them.
package enum SystemCall: Sendable, Hashable, CustomStringConvertible {
    /// `send` (a socket write without descriptors, a TLS stream's write).
    case send
    /// `sendmsg` (a socket write with descriptors, SCM_RIGHTS).
    case sendmsg
    /// `recv` (a peek at a socket's head, a TLS stream's read).
    case recv
    /// `recvmsg` (every socket read of a connection).
    case recvmsg
    /// Not a call of its own: the descriptors a `recvmsg` brought, for the fault seam's
    /// `descriptorsDropped` (a rule counts only reads that brought some).
    case receivedDescriptors
    /// `accept4` on a listening socket.
    case accept
    /// `connect` to a socket address.
    case connect
    /// `socketpair`.
    case socketpair
    /// `pipe2`.
    case pipe
    /// `read` (a pipe, an eventfd, a file).
    case read
    /// `write` (a pipe, an eventfd, a file).
    case write
    /// `poll` of one descriptor, or `ppoll` of a set.
    case poll
    /// `waitpid`.
    case waitpid
    /// `epoll_ctl` (adding, changing or removing a descriptor of an epoll set).
    case epollControl
    /// `epoll_pwait2` or `epoll_wait`.
    case epollWait
    /// Any other call (`fcntl`, `setsockopt`, `epoll_create1`, …): never faulted.
    case other

    /// The C function's name.
    package var description: String {
        switch self {
        case .send: "send"
        case .sendmsg: "sendmsg"
        case .recv: "recv"
        case .recvmsg: "recvmsg"
        case .receivedDescriptors: "recvmsg (descriptors)"
        case .accept: "accept"
        case .connect: "connect"
        case .socketpair: "socketpair"
        case .pipe: "pipe"
        case .read: "read"
        case .write: "write"
        case .poll: "poll"
        case .waitpid: "waitpid"
        case .epollControl: "epoll_ctl"
        case .epollWait: "epoll_wait"
        case .other: "other"
        }
    }
}

/// Makes one system call: the only place in the package that handles `EINTR`, and the
/// only place the fault seam acts.
///
/// `body` makes the call, given how many bytes it may move: `count`, or fewer when the
/// fault seam injects a short write (calls that move no bytes ignore it). A return of
/// `-1` is a failure with the current `errno`.
///
/// The `EINTR` policy, for every call: a call interrupted by a signal is made again at
/// once, by calling `body` again, and the caller never sees `EINTR`. A wait whose body
/// computes its timeout from a deadline (`poll(_:timeout:)`, `sem_timedwait`) thus waits
/// for the time left; one given a fixed relative timeout (`poll(_:milliseconds:)`, the
/// loop's `epoll_pwait2`) waits it again in full. Only `close` passes
/// `retryOnInterrupt: false`: on Linux the descriptor is released even when `close`
/// reports `EINTR`, and a second `close` could close a number reused meanwhile. A failure
/// with `EBADF` is counted in `SystemCallAudit`.
@inline(__always)
package func systemCall<I: FixedWidthInteger>(
    _ call: SystemCall, on descriptor: CInt = -1, count: Int = 0, retryOnInterrupt: Bool = true, _ body: (Int) -> I
) -> Result<I, Errno> {
    while true {
        let error: Errno
        // One relaxed load when no test has armed a fault.
        let injected = portkit_fault_seam_armed() == 0 ? nil : FaultSeam.take(call, descriptor: descriptor)
        switch injected {
        case .none, .descriptorsDropped?:
            let value = body(count)
            if value != -1 { return .success(value) }
            error = .current
        case .failure(let fault)?:
            error = fault
        case .shortWrite(let limit)?:
            let value = body(min(limit, count))
            if value != -1 { return .success(value) }
            error = .current
        }
        if retryOnInterrupt && error == .interrupted { continue }
        if error == .badFileDescriptor { SystemCallAudit.badDescriptors.add(1, ordering: .relaxed) }
        return .failure(error)
    }
}

/// `systemCall` for a call that moves no bytes: its value, or the `errno` it failed with.
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(
    _ call: SystemCall = .other, on descriptor: CInt = -1, retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<I, Errno> {
    systemCall(call, on: descriptor, retryOnInterrupt: retryOnInterrupt) { _ in body() }
}

/// `valueOrErrno` for calls whose success value is not needed.
@inline(__always)
package func nothingOrErrno<I: FixedWidthInteger>(
    _ call: SystemCall = .other, on descriptor: CInt = -1, retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<Void, Errno> {
    valueOrErrno(call, on: descriptor, retryOnInterrupt: retryOnInterrupt, body).map { _ in () }
}

/// What the system calls of this process saw that should never happen, counted for tests.
package enum SystemCallAudit {
    /// Calls that failed with `EBADF` (or polls that found `POLLNVAL`): a descriptor used
    /// after it was closed. Its number may have been reused meanwhile, so such a call can
    /// reach an unrelated file; the package's own code should never make one.
    package static let badDescriptors = Atomic<Int>(0)
}
