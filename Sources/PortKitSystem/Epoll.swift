import CPortKitSystem
import Glibc
import Synchronization

/// An epoll instance: the readiness set a Linux poller waits on. Its calls go through
/// `systemCall`, so the fault seam reaches them (`SystemCall.epollControl`, `.epollWait`).
package struct Epoll {
    /// The epoll descriptor (close-on-exec).
    package let descriptor: FileDescriptor

    /// Makes an empty set. The corresponding C function is `epoll_create1`.
    package init() throws(Errno) {
        descriptor = FileDescriptor(rawValue: try valueOrErrno { epoll_create1(CInt(EPOLL_CLOEXEC)) }.get())
    }

    /// Adds `watched` to the set (`EPOLL_CTL_ADD`), changes its events (`EPOLL_CTL_MOD`) or
    /// removes it (`EPOLL_CTL_DEL`), reporting `events` under `token`. The fault seam's
    /// descriptor scope matches `watched`.
    ///
    /// The corresponding C function is `epoll_ctl`.
    package func control(_ operation: CInt, _ watched: FileDescriptor, events: UInt32, token: UInt64) throws(Errno) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        try nothingOrErrno(.epollControl, on: watched.rawValue) {
            epoll_ctl(descriptor.rawValue, operation, watched.rawValue, &event)
        }.get()
    }

    /// Set once `epoll_pwait2` is found missing (a kernel before 5.11, valgrind, some
    /// sandboxes): `epoll_wait` with the timeout rounded up to whole milliseconds is used.
    private static let hasPreciseWait = Atomic<Bool>(true)

    /// Waits until a watched descriptor is ready or `timeout` passes (`nil`: no limit);
    /// fills `events` from its start and returns how many it filled. Interrupted by a
    /// signal, it waits again for the whole timeout (the loop computes the next one anyway).
    ///
    /// The corresponding C function is `epoll_pwait2`, or `epoll_wait` where the kernel
    /// lacks it.
    package func wait(into events: UnsafeMutableBufferPointer<epoll_event>, timeout: Duration?) throws(Errno) -> Int {
        let capacity = CInt(events.count)
        if Self.hasPreciseWait.load(ordering: .relaxed) {
            let result: Result<CInt, Errno>
            if let timeout {
                let (seconds, attoseconds) = max(timeout, .zero).components
                var spec = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
                result = valueOrErrno(.epollWait, on: descriptor.rawValue) {
                    epoll_pwait2(descriptor.rawValue, events.baseAddress, capacity, &spec, nil)
                }
            } else {
                result = valueOrErrno(.epollWait, on: descriptor.rawValue) {
                    epoll_pwait2(descriptor.rawValue, events.baseAddress, capacity, nil, nil)
                }
            }
            guard case .failure(.notImplemented) = result else { return Int(try result.get()) }
            Self.hasPreciseWait.store(false, ordering: .relaxed)
        }
        var milliseconds: CInt = -1
        if let timeout {
            let ms = (max(timeout, .zero) / .milliseconds(1)).rounded(.up)
            milliseconds = CInt(min(ms, Double(CInt.max)))
        }
        return Int(try valueOrErrno(.epollWait, on: descriptor.rawValue) {
            epoll_wait(descriptor.rawValue, events.baseAddress, capacity, milliseconds)
        }.get())
    }

    /// Closes the epoll descriptor.
    package func close() {
        try? descriptor.close()
    }
}
