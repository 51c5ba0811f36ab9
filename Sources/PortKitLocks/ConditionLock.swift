import Glibc

/// A value guarded by a pthread mutex, with a condition variable to wait for changes of it
/// with a deadline. Used where a thread must block: a full queue, a reply not yet there.
///
/// Like `Locked` (and public for the same reason): a value type holding one object
/// (`ConditionLockStorage`: the value, the mutex and the condition variable in one
/// allocation); copies share the lock.
// Safety of @unchecked Sendable: the value is only reached with the mutex held (in
// `withLock` and `wait`); value, mutex and condition live in the storage object, which
// never moves and which `storage` keeps.
public struct ConditionLock<Value>: @unchecked Sendable {
    /// Keeps the object alive that the pointers below point into.
    @usableFromInline let storage: AnyObject
    // By address, as in `Locked`.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let condition: UnsafeMutablePointer<pthread_cond_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    /// Guards `value`.
    @inlinable
    public init(_ value: Value) {
        let storage = ConditionLockStorage.make(value)
        self.storage = storage
        (self.value, mutex) = storage.withUnsafeMutablePointers { ($0, $1) }
        condition = ConditionLockStorage<Value>.condition(in: mutex)
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable
    public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Holds the lock until `ready` returns a result or `deadline` passes (`nil`: no
    /// deadline); `ready` is asked again after every `signal`/`broadcast`. Returns `nil`
    /// on time-out.
    @inlinable
    public func wait<Result>(until deadline: ContinuousClock.Instant?, _ ready: (inout Value) -> Result?) -> Result? {
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
    public func broadcast() { pthread_cond_broadcast(condition) }
}

/// The object behind a `ConditionLock`: the value as its header; in its tail a mutex, then
/// a condition variable (the tail is counted in mutex-sized elements, enough for both).
@usableFromInline
final class ConditionLockStorage<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    /// Where the condition variable starts: after the mutex, aligned for it.
    @inlinable
    static var conditionOffset: Int {
        let alignment = MemoryLayout<pthread_cond_t>.alignment
        return (MemoryLayout<pthread_mutex_t>.stride + alignment - 1) / alignment * alignment
    }

    /// The condition variable in a tail that starts at `tail`.
    @inlinable
    static func condition(in tail: UnsafeMutablePointer<pthread_mutex_t>) -> UnsafeMutablePointer<pthread_cond_t> {
        (UnsafeMutableRawPointer(tail) + conditionOffset).assumingMemoryBound(to: pthread_cond_t.self)
    }

    /// Storage holding `value`, its mutex and condition initialized.
    @inlinable
    static func make(_ value: Value) -> ConditionLockStorage<Value> {
        let bytes = conditionOffset + MemoryLayout<pthread_cond_t>.size
        let elements = (bytes + MemoryLayout<pthread_mutex_t>.stride - 1) / MemoryLayout<pthread_mutex_t>.stride
        let storage = unsafeDowncast(create(minimumCapacity: elements) { _ in value }, to: ConditionLockStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { tail in
            LockTail.initializeMutex(tail)
            let condition = (UnsafeMutableRawPointer(tail) + conditionOffset).bindMemory(to: pthread_cond_t.self, capacity: 1)
            LockTail.initializeCondition(condition)
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { tail in
            LockTail.destroyCondition(Self.condition(in: tail))
            LockTail.destroyMutex(tail)
        }
    }
}
