import Glibc

/// A value guarded by a pthread mutex, with a condition variable to wait for changes of it
/// with a deadline. Used where a thread must block: a full queue, a reply not yet there.
// Safety of @unchecked Sendable: `value` is only reached with `mutex` held (in
// `withLock` and `wait`); the mutex, condition and value live at fixed heap addresses
// (one `LockBlock`).
// Inlinable, the value behind a pointer: see `Locked` (here `wait` also looked up the
// metadata of `Result?` on every call).
package final class ConditionLock<Value>: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let condition: UnsafeMutablePointer<pthread_cond_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    /// Guards `value`.
    package init(_ value: Value) {
        let block = LockBlock(for: Value.self, withCondition: true)
        mutex = block.makeMutex()
        condition = block.makeCondition()
        self.value = block.value(value)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        value.deinitialize(count: 1)
        LockBlock<Value>.destroy(mutex)
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Holds the lock until `ready` returns a result or `deadline` passes (`nil`: no
    /// deadline); `ready` is asked again after every `signal`/`broadcast`. Returns `nil`
    /// on time-out.
    @inlinable
    package func wait<Result>(until deadline: ContinuousClock.Instant?, _ ready: (inout Value) -> Result?) -> Result? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if let result = ready(&value.pointee) { return result }
            guard let deadline else {
                pthread_cond_wait(condition, mutex)
                continue
            }
            let left = deadline - .now
            if left <= .zero { return nil }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let (seconds, attoseconds) = left.components
            var nanoseconds = now.tv_nsec + Int(attoseconds / 1_000_000_000)
            var wake = timespec(tv_sec: now.tv_sec + Int(seconds) + nanoseconds / 1_000_000_000, tv_nsec: 0)
            nanoseconds %= 1_000_000_000
            wake.tv_nsec = nanoseconds
            pthread_cond_timedwait(condition, mutex, &wake)
        }
    }

    /// Wakes every waiter (they re-check their condition).
    @inlinable
    package func broadcast() { pthread_cond_broadcast(condition) }
}
