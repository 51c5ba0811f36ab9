import Synchronization

/// Watches a loop's passes: called on the loop's thread at the activities it asked for.
///
/// Observers of a mode are called in ascending `order` (ties in the order they were
/// added). A non-repeating observer is invalidated after its first call.
public final class LoopObserver: Sendable {
    /// The activities this observer is called for.
    public let activities: LoopActivity
    /// Whether it stays after being called once.
    public let repeats: Bool
    /// Lower orders are called first.
    public let order: Int
    let handler: @Sendable (LoopObserver, LoopActivity) -> Void
    let attachment = AttachmentLock(Attachment())

    /// Makes an observer.
    /// - Parameters:
    ///   - activities: the activities to be called for.
    ///   - repeats: `true` (the default) to be called at every such activity, `false` once.
    ///   - order: lower orders are called first; 0 by default.
    ///   - handler: called on the loop's thread with the observer and the activity.
    public init(
        activities: LoopActivity, repeats: Bool = true, order: Int = 0,
        handler: @escaping @Sendable (LoopObserver, LoopActivity) -> Void
    ) {
        self.activities = activities
        self.repeats = repeats
        self.order = order
        self.handler = handler
    }

    /// Whether the observer will still be called.
    public var isValid: Bool { attachment.withLock { $0.isValid } }

    /// Removes the observer from its loop for good. Safe from any thread.
    public func invalidate() {
        let loop = attachment.withLock { $0.invalidate() }
        loop?.itemInvalidated(.observer(self))
    }
}
