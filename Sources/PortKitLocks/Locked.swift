import Glibc

/// A value guarded by a pthread mutex: the package's lock.
///
/// A value type holding one object (`LockedStorage`: the value and the mutex in one
/// allocation); copies share the lock, as copies of a class reference would.
///
/// Why not `Synchronization.Mutex`: with this toolchain on Linux, ThreadSanitizer does not
/// see `Mutex`'s lock and unlock, and reports every access it guards as a race (checked:
/// four threads appending under one `Mutex` give "Swift access race"). A pthread mutex is
/// intercepted by ThreadSanitizer and costs the same uncontended (one futex word).
///
/// Public, not package: with this toolchain an `@inlinable` package declaration is not
/// inlined into other modules (every lock of the other layers went through the generic,
/// unspecialized `withLock`); a public one is. This module is no product's: nothing outside
/// the package imports it.
// Safety of @unchecked Sendable: the value is only reached inside `withLock`, which holds
// the mutex; both live in the storage object, which never moves and which `storage` keeps.
public struct Locked<Value>: @unchecked Sendable {
    /// Keeps the object alive that the pointers below point into.
    @usableFromInline let storage: AnyObject
    // The mutex and the value by address (they never move): an unspecialized `withLock`
    // then needs no generic metadata to reach them.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    /// Guards `value`.
    // Inlinable: specialized where the value's type is known, the storage's metadata is a
    // cached accessor call, not a generic lookup per lock made.
    @inlinable
    public init(_ value: Value) {
        let storage = LockedStorage.make(value)
        self.storage = storage
        (self.value, mutex) = storage.withUnsafeMutablePointers { ($0, $1) }
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable
    public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}

/// The object behind a `Locked`: the value as its header, the mutex in its tail.
@usableFromInline
final class LockedStorage<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    /// Storage holding `value`, its mutex initialized.
    @inlinable
    static func make(_ value: Value) -> LockedStorage<Value> {
        let storage = unsafeDowncast(create(minimumCapacity: 1) { _ in value }, to: LockedStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { LockTail.initializeMutex($0) }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { LockTail.destroyMutex($0) }
    }
}

/// What the lock objects keep in their tails: a mutex, and a condition variable for
/// `ConditionLock`.
@usableFromInline
enum LockTail {
    @usableFromInline
    static func initializeMutex(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    static func destroyMutex(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
    }

    /// Initializes a condition variable that waits by the monotonic clock.
    @usableFromInline
    static func initializeCondition(_ condition: UnsafeMutablePointer<pthread_cond_t>) {
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    static func destroyCondition(_ condition: UnsafeMutablePointer<pthread_cond_t>) {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
    }
}
