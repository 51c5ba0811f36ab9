import PortKitLocks

/// The part of the sleep handshake (see `Poller`) both Linux backends share: which sleep
/// the next `wait` takes, and the futex word an unwatched sleep (no descriptor watched)
/// waits on, which a waker flips and wakes in one system call.
///
/// `prepared` is the loop's thread's alone (`prepare`, `take`); `wake` is for any thread.
final class SleepChoice {
    private let word = WakeWord()
    /// The sleep `prepare` chose for the next `wait`. `@exclusivity(unchecked)`: the loop's
    /// thread alone touches it, and no access spans another.
    @exclusivity(unchecked) private var prepared: PollerSleep?

    /// Chooses the next wait's sleep: in the readiness set when `watching`, else on the
    /// futex, which is armed now so that a wake-up from now on ends that sleep.
    func prepare(watching: Bool) -> PollerSleep {
        let sleep: PollerSleep = watching ? .watching : .unwatched
        if sleep == .unwatched { word.reset() }
        prepared = sleep
        return sleep
    }

    /// The sleep `prepare` chose for this wait (used once), else `unprepared`.
    func take(orElse unprepared: @autoclosure () -> PollerSleep) -> PollerSleep {
        defer { prepared = nil }
        return prepared ?? unprepared()
    }

    /// An unwatched wait: nothing at all for a zero timeout (with no descriptor armed, a
    /// poll could only report the wake-up, which the loop's own flags carry), else a sleep
    /// on the futex until woken or `timeout` (`nil`: no limit).
    func sleep(timeout: Duration?) {
        if let timeout, timeout <= .zero { return }
        word.sleep(timeout: timeout)
    }

    /// Ends the current or the next unwatched sleep. Safe from any thread.
    func wake() { word.wake() }
}
