import Glibc

/// A value guarded by a pthread mutex: the package's lock.
///
/// Why not `Synchronization.Mutex`: with this toolchain on Linux, ThreadSanitizer does not
/// see `Mutex`'s lock and unlock, and reports every access it guards as a race (checked:
/// four threads appending under one `Mutex` give "Swift access race"). A pthread mutex is
/// intercepted by ThreadSanitizer and costs the same uncontended (one futex word).
// Safety of @unchecked Sendable: `value` is only reached inside `withLock`, which holds
// `mutex`; the mutex and the value live at fixed heap addresses for the object's life.
package final class Locked<Value>: @unchecked Sendable {
    // Inlinable, and the value behind a pointer: called from another module, an
    // unspecialized `withLock` paid a generic metadata lookup and a dynamic exclusivity check
    // (a class `var` passed inout) on every call, about a tenth of a port message's work.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    /// Guards `value`.
    package init(_ value: Value) {
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
        mutex = makePthreadMutex()
    }

    deinit {
        destroyPthreadMutex(mutex)
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
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
