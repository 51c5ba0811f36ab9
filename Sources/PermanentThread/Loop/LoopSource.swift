import Synchronization

/// A custom input source: work that another thread signals and the loop performs.
///
/// When added to a mode its `schedule` callback runs on the loop's thread; `signal()`
/// (from any thread) marks it and wakes its loop, and on the next pass in one of its
/// modes the loop calls `perform` once; removing or invalidating it calls `cancel`.
/// Sources of a mode are performed in ascending `order`.
public final class LoopSource: Sendable {
    /// Lower orders are performed first.
    public let order: Int
    let onSchedule: (@Sendable (ThreadLoop, LoopMode) -> Void)?
    let onPerform: @Sendable () -> Void
    let onCancel: (@Sendable (ThreadLoop, LoopMode) -> Void)?
    let signalled = Atomic<Bool>(false)
    let attachment = AttachmentLock(Attachment())

    /// Makes a custom source.
    /// - Parameters:
    ///   - order: lower orders are performed first; 0 by default.
    ///   - schedule: called on the loop's thread when the source is added to a mode.
    ///   - cancel: called on the loop's thread when it leaves a mode (removed, invalidated,
    ///     or its thread ended).
    ///   - perform: called on the loop's thread once per signal.
    public init(
        order: Int = 0,
        schedule: (@Sendable (ThreadLoop, LoopMode) -> Void)? = nil,
        cancel: (@Sendable (ThreadLoop, LoopMode) -> Void)? = nil,
        perform: @escaping @Sendable () -> Void
    ) {
        self.order = order
        self.onSchedule = schedule
        self.onCancel = cancel
        self.onPerform = perform
    }

    /// Whether the source is still usable.
    public var isValid: Bool { attachment.withLock { $0.isValid } }

    /// Whether the source is signalled and not yet performed.
    public var isSignalled: Bool { signalled.load(ordering: .acquiring) }

    /// Marks the source as having work and wakes its loop. Safe from any thread; signals
    /// that arrive before the loop performs the source are coalesced into one perform.
    public func signal() {
        // Only the signal that sets the flag queues the source: until it is performed, the
        // loop holds it queued already (or queues it when it is added to a mode).
        guard !signalled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        attachment.withLock { $0.loop }?.sourceSignalled(self)
    }

    /// Removes the source from its loop for good (its `cancel` runs). Safe from any thread.
    public func invalidate() {
        let loop = attachment.withLock { $0.invalidate() }
        loop?.itemInvalidated(.source(self))
    }
}
