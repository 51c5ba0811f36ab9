import CPortKitSystem
import Glibc

extension FileDescriptor {
    /// Waits until one of `set`'s descriptors is ready for its events or `timeout` passes
    /// (`nil`: no limit); fills in their `revents` and returns how many have some (0 on
    /// time-out). Interrupted by a signal, it waits again for the whole timeout.
    ///
    /// The corresponding C function is `ppoll` (a nanosecond timeout).
    package static func poll(_ set: inout [pollfd], timeout: Duration?) throws(Errno) -> Int {
        let count = UInt(set.count)
        let ready: CInt
        if let timeout {
            let (seconds, attoseconds) = max(timeout, .zero).components
            var spec = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            ready = try valueOrErrno(.poll) { portkit_ppoll(&set, count, &spec) }.get()
        } else {
            ready = try valueOrErrno(.poll) { portkit_ppoll(&set, count, nil) }.get()
        }
        return Int(ready)
    }

    /// The descriptor's file type (`S_IFREG`, `S_IFDIR`, `S_IFSOCK`, …).
    ///
    /// The corresponding C function is `fstat`.
    package func fileType() throws(Errno) -> mode_t {
        var status = stat()
        try nothingOrErrno { fstat(rawValue, &status) }.get()
        return status.st_mode & S_IFMT
    }
}
