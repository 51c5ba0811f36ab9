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
        let block = LockBlock(for: Value.self)
        mutex = block.makeMutex()
        self.value = block.value(value)
    }

    deinit {
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
}

/// One heap block for a lock: its pthread objects first (a mutex, and a condition variable
/// after it for `ConditionLock`), then the value, so a lock costs one allocation besides its
/// object rather than one per part. The block never moves, as a mutex must not once used.
struct LockBlock<Value> {
    /// The block's start: the mutex.
    let base: UnsafeMutableRawPointer
    /// Where the value goes.
    let valueAddress: UnsafeMutableRawPointer

    /// Room for a mutex, a condition variable when `withCondition`, and a `Value`.
    init(for _: Value.Type, withCondition: Bool = false) {
        var header = MemoryLayout<pthread_mutex_t>.stride
        if withCondition {
            header = Self.rounded(header, to: MemoryLayout<pthread_cond_t>.alignment) + MemoryLayout<pthread_cond_t>.stride
        }
        let valueOffset = Self.rounded(header, to: MemoryLayout<Value>.alignment)
        let alignment = max(MemoryLayout<pthread_mutex_t>.alignment, MemoryLayout<pthread_cond_t>.alignment, MemoryLayout<Value>.alignment)
        base = .allocate(byteCount: valueOffset + max(MemoryLayout<Value>.size, 1), alignment: alignment)
        valueAddress = base + valueOffset
    }

    /// The block's mutex, initialized.
    func makeMutex() -> UnsafeMutablePointer<pthread_mutex_t> {
        let mutex = base.bindMemory(to: pthread_mutex_t.self, capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        return mutex
    }

    /// The block's condition variable (after the mutex), initialized to wait by the
    /// monotonic clock.
    func makeCondition() -> UnsafeMutablePointer<pthread_cond_t> {
        let offset = Self.rounded(MemoryLayout<pthread_mutex_t>.stride, to: MemoryLayout<pthread_cond_t>.alignment)
        let condition = (base + offset).bindMemory(to: pthread_cond_t.self, capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        return condition
    }

    /// The block's value, initialized to `value`.
    func value(_ value: Value) -> UnsafeMutablePointer<Value> {
        let pointer = valueAddress.bindMemory(to: Value.self, capacity: 1)
        pointer.initialize(to: value)
        return pointer
    }

    /// Destroys the mutex at the start of a block and frees the block; the value (already
    /// deinitialized) and any condition variable (already destroyed) go with it.
    static func destroy(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        UnsafeMutableRawPointer(mutex).deallocate()
    }

    private static func rounded(_ offset: Int, to alignment: Int) -> Int {
        (offset + alignment - 1) / alignment * alignment
    }
}
