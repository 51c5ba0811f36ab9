import Glibc

/// Tells whether one thread of this process is asleep in epoll or on a futex, from the
/// kernel function it waits in (`/proc/self/task/TID/wchan`: `do_epoll_wait` or `ep_poll`;
/// `futex_do_wait` or `futex_wait_queue`). A `ThreadLoop` that watches no descriptor sleeps
/// on a futex, a pthread condition variable too.
///
/// The wake benchmark waits on it before each post, so that every post really wakes a
/// sleeping loop instead of catching it on its way back to sleep.
struct ThreadSleepProbe {
    private let descriptor: CInt

    /// Opens the probe of thread `threadID` (a kernel thread id of this process).
    /// - Throws: `BenchmarkError.system` when the wchan file cannot be opened.
    init(threadID: CInt) throws(BenchmarkError) {
        let path = "/proc/self/task/\(threadID)/wchan"
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .lastSystemError("open(\(path))") }
    }

    /// Whether the thread sleeps in epoll or on a futex now.
    func isAsleep() -> Bool {
        var buffer = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        return withUnsafeMutableBytes(of: &buffer) { bytes in
            let count = pread(descriptor, bytes.baseAddress, bytes.count, 0)
            guard count > 0 else { return false }
            let function = String(decoding: bytes.prefix(count), as: UTF8.self)
            return function.contains("epoll") || function.contains("futex")
        }
    }

    /// Spins until the thread sleeps in epoll or on a futex.
    /// - Throws: `BenchmarkError.timedOut` if it does not within `timeout`.
    func waitUntilAsleep(timeout: Duration = .seconds(5)) throws(BenchmarkError) {
        let deadline = ContinuousClock.now + timeout
        while !isAsleep() {
            if ContinuousClock.now > deadline { throw .timedOut("the loop thread did not go to sleep") }
        }
    }

    /// Closes the probe's descriptor.
    func close() {
        _ = Glibc.close(descriptor)
    }
}
