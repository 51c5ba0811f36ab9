import CPortKitSystem

/// The word a Linux poller sleeps on while it watches no descriptor (`SleepChoice`): a
/// futex, which a waker flips and wakes in one system call, cheaper than the epoll set's
/// eventfd (measured by `execute.roundtrip` and `loop.wake`).
///
/// The protocol, kept by the poller's sleep handshake (see `Poller`): the loop's thread
/// `reset()`s the word before it says it sleeps, then `sleep(timeout:)`s; the one waker
/// that claims the sleep `wake()`s it. A wake that comes before the sleep leaves the word
/// at 1, so the sleep returns at once: no wake-up is lost.
// Safety of @unchecked Sendable: the word is only touched through the C functions, which
// use atomic loads and stores and the futex system call; the storage is freed in deinit,
// when no thread can hold a reference any more.
// Public and inlinable, as `Locked` is: the poller (another module) arms, sleeps on and wakes it on
// every sleep of a loop that watches no descriptor.
public final class WakeWord: @unchecked Sendable {
    @usableFromInline let word: UnsafeMutablePointer<UInt32>

    /// Makes a word at 0.
    public init() {
        word = .allocate(capacity: 1)
        word.initialize(to: 0)
    }

    deinit { word.deallocate() }

    /// Arms the word for the next sleep. Called by the sleeping thread only.
    @inlinable
    public func reset() { portkit_futex_reset(word) }

    /// Sleeps until woken, or for at most `timeout` (`nil`: no limit). May return early.
    @inlinable
    public func sleep(timeout: Duration?) {
        _ = portkit_futex_sleep(word, timeout.map(futexNanoseconds) ?? -1)
    }

    /// Ends the current or the next sleep. Safe from any thread.
    @inlinable
    public func wake() { portkit_futex_wake(word) }
}

/// `timeout` in nanoseconds for a futex wait (at least 0); -1, no limit at all, beyond
/// about 285 years.
@usableFromInline
func futexNanoseconds(_ timeout: Duration) -> Int64 {
    let (seconds, attoseconds) = max(timeout, .zero).components
    return seconds < 9_000_000_000 ? seconds * 1_000_000_000 + attoseconds / 1_000_000_000 : -1
}
