import CPortKitSystem

/// A word one thread waits on until another marks it done. The waiter says it sleeps
/// before it sleeps on the word (a futex), and the marker makes the system call to wake it
/// only then: a mark that comes before the wait costs none. A `sync` call's caller waits on
/// one (`SyncSlot`), and so does PortMessaging's requester of an in-process reply.
// Safety of @unchecked Sendable: the word is touched only through the C atomics (a load
// acquires, a mark releases, so what the marker wrote before is seen by the waiter) and the
// futex calls; its owner frees it (`deallocate`) once no thread uses it.
// Public and inlinable, as `Locked` is: PortMessaging's reply slots mark and test it on every
// in-process request.
public struct DoneWord: @unchecked Sendable {
    @usableFromInline let word: UnsafeMutablePointer<UInt32>

    /// The word's values.
    @usableFromInline enum State {
        @usableFromInline static let pending: UInt32 = 0
        @usableFromInline static let done: UInt32 = 1
        /// The waiter sleeps on the word (or is about to): the mark must wake it.
        @usableFromInline static let sleeping: UInt32 = 2
    }

    /// A word, done already or not.
    @inlinable
    public init(done: Bool) {
        word = .allocate(capacity: 1)
        word.initialize(to: done ? State.done : State.pending)
    }

    /// Frees the word; no thread may use it after.
    @inlinable
    public func deallocate() { word.deallocate() }

    /// Makes the word not done, before the work it stands for begins. The waiter's thread only.
    @inlinable
    public func reset() { portkit_word_store(word, State.pending) }

    /// Whether the word is done.
    @inlinable
    public var isDone: Bool { portkit_word_load(word) == State.done }

    /// Marks the word done, and wakes the waiter if it sleeps. Once after each reset.
    @inlinable
    public func markDone() {
        if portkit_word_exchange(word, State.done) == State.sleeping { portkit_futex_wake_one(word) }
    }

    /// Waits until the word is done, or for at most `timeout` (`nil`: no limit); whether it
    /// is done. One thread waits on a word at a time.
    ///
    /// The time limit becomes a deadline on the monotonic clock in C, read once, and the
    /// futex waits to it: no `ContinuousClock` reading and no `Duration` arithmetic (128-bit,
    /// a few hundred instructions a wait) per sleep.
    public func wait(timeout: Duration?) -> Bool {
        if portkit_word_load(word) == State.done { return true }
        let deadline = timeout.map { portkit_futex_deadline(futexNanoseconds($0)) } ?? -1
        while true {
            let now = portkit_word_load(word)
            if now == State.done { return true }
            if now == State.pending && !portkit_word_compare_exchange(word, State.pending, State.sleeping) { continue }
            if portkit_futex_wait_while_until(word, State.sleeping, deadline) == 1 {
                return portkit_word_load(word) == State.done
            }
        }
    }
}
