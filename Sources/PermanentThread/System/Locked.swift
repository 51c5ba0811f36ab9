import Glibc

/// A value guarded by a pthread mutex: the package's lock.
///
/// Why not `Synchronization.Mutex`: with this toolchain on Linux, ThreadSanitizer does not
/// see `Mutex`'s lock and unlock, and reports every access it guards as a race (checked:
/// four threads appending under one `Mutex` give "Swift access race"). A pthread mutex is
/// intercepted by ThreadSanitizer and costs the same uncontended (one futex word).
package final class Locked<Value>: @unchecked Sendable {
    // Safety of @unchecked Sendable: `value` is only reached inside `withLock`, which holds
    // `mutex`; the mutex itself lives at a fixed heap address for the object's life.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    /// Guards `value`.
    package init(_ value: Value) {
        self.value = value
        mutex = makePthreadMutex()
    }

    deinit { destroyPthreadMutex(mutex) }

    /// Runs `body` with the value while holding the lock.
    @inline(__always)
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// A pthread mutex at a fixed heap address (a mutex must not move once used).
func makePthreadMutex() -> UnsafeMutablePointer<pthread_mutex_t> {
    let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    pthread_mutex_init(mutex, nil)
    return mutex
}

/// Destroys and frees a mutex made by `makePthreadMutex`.
func destroyPthreadMutex(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) {
    pthread_mutex_destroy(mutex)
    mutex.deinitialize(count: 1)
    mutex.deallocate()
}
