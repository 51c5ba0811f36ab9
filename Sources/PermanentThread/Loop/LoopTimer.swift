import Synchronization
import PortKitLocks

/// A timer on a run loop: fires once, or repeatedly at a fixed interval.
///
/// A repeating timer whose handler overran skips the dates it missed: it fires once,
/// late, and then at the next date of its schedule that is still in the future, never
/// in a burst. `tolerance` lets the loop fire it up to that much late, so that wake-ups
/// of several timers can be shared.
public final class LoopTimer: Sendable {
    /// The time between fires of a repeating timer; `nil` for a one-shot timer.
    public let interval: Duration?
    /// How late the loop may fire the timer, to share a wake-up with other timers.
    public let tolerance: Duration
    let handler: @Sendable (LoopTimer) -> Void
    let attachment = AttachmentLock(Attachment())
    private let schedule: Locked<ContinuousClock.Instant>

    /// Makes a timer that first fires at `fireDate`.
    /// - Parameters:
    ///   - fireDate: the first fire date.
    ///   - interval: the period of a repeating timer; `nil` (the default) fires once.
    ///   - tolerance: how late the loop may fire it; zero by default.
    ///   - handler: called on the loop's thread at each fire, with the timer.
    public init(
        fireAt fireDate: ContinuousClock.Instant, interval: Duration? = nil, tolerance: Duration = .zero,
        handler: @escaping @Sendable (LoopTimer) -> Void
    ) {
        precondition(interval.map { $0 > .zero } ?? true, "a repeating timer needs a positive interval")
        self.interval = interval
        self.tolerance = max(tolerance, .zero)
        self.handler = handler
        self.schedule = Locked(fireDate)
    }

    /// Makes a timer that first fires `delay` from now.
    /// - Parameters:
    ///   - delay: time until the first fire.
    ///   - interval: the period of a repeating timer; `nil` (the default) fires once.
    ///   - tolerance: how late the loop may fire it; zero by default.
    ///   - handler: called on the loop's thread at each fire, with the timer.
    public convenience init(
        after delay: Duration, repeating interval: Duration? = nil, tolerance: Duration = .zero,
        handler: @escaping @Sendable (LoopTimer) -> Void
    ) {
        self.init(fireAt: .now + delay, interval: interval, tolerance: tolerance, handler: handler)
    }

    /// The next date the timer is due.
    public var fireDate: ContinuousClock.Instant { schedule.withLock { $0 } }

    /// Whether the timer can still fire: false after `invalidate()` or after a one-shot fired.
    public var isValid: Bool { attachment.withLock { $0.isValid } }

    /// Stops the timer for good and removes it from its loop. Safe from any thread; on the
    /// loop's thread the timer will not fire again once this returns.
    public func invalidate() {
        let loop = attachment.withLock { $0.invalidate() }
        loop?.itemInvalidated(.timer(self))
    }

    /// Moves the next fire date (the loop, after a repeating timer fired).
    func setFireDate(_ date: ContinuousClock.Instant) {
        schedule.withLock { $0 = date }
    }

    /// The first date of the schedule strictly after `now`, skipping missed fires.
    func nextFireDate(after now: ContinuousClock.Instant, interval: Duration) -> ContinuousClock.Instant {
        let last = fireDate
        var next = last + interval
        if next <= now {
            let missed = (now - last) / interval   // whole periods elapsed
            next = last + interval * Int(missed.rounded(.down))
            while next <= now { next += interval }
        }
        return next
    }
}
