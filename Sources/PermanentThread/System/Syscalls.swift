import Glibc
import Synchronization

// Every raw system call of the package that touches descriptors goes through this file,
// so that error handling (and EINTR) lives in one place.

/// Turns a C return value into a `Result`: `-1` becomes the current `errno`.
///
/// When `retryOnInterrupt` is set, a call that failed with `EINTR` is made again:
/// the only place in the package that handles `EINTR`.
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(
    retryOnInterrupt: Bool = true, _ call: () -> I
) -> Result<I, Errno> {
    while true {
        let value = call()
        if value != -1 { return .success(value) }
        let error = Errno.current
        if retryOnInterrupt && error == .interrupted { continue }
        if error == .badFileDescriptor { SystemCallAudit.badDescriptors.add(1, ordering: .relaxed) }
        return .failure(error)
    }
}

/// Same as `valueOrErrno` for calls whose success value is not needed.
@inline(__always)
package func nothingOrErrno<I: FixedWidthInteger>(
    retryOnInterrupt: Bool = true, _ call: () -> I
) -> Result<Void, Errno> {
    valueOrErrno(retryOnInterrupt: retryOnInterrupt, call).map { _ in () }
}

/// What the system calls of this process saw that should never happen, counted for tests.
package enum SystemCallAudit {
    /// Calls that failed with `EBADF` (or polls that found `POLLNVAL`): a descriptor used
    /// after it was closed. Its number may have been reused meanwhile, so such a call can
    /// reach an unrelated file; the package's own code should never make one.
    package static let badDescriptors = Atomic<Int>(0)
}
