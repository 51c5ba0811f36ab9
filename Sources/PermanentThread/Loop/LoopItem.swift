import Synchronization

/// Where a timer, observer or source is scheduled: shared by every kind of loop item.
///
/// An item belongs to at most one loop; it can be in several of that loop's modes.
struct Attachment {
    weak var loop: ThreadLoop?
    var isValid = true
    /// The real modes (never `common`) the item is in on its loop. Loop thread only.
    var modes: Set<LoopMode> = []
    /// A descriptor source's descriptor is registered with the loop's poller.
    var registered = false

    /// Claims the item for `loop`, or says why it cannot be.
    mutating func attach(to loop: ThreadLoop) throws(ThreadLoopError) {
        guard isValid else { throw .invalidated }
        if let current = self.loop, current !== loop { throw .scheduledOnAnotherLoop }
        self.loop = loop
    }

    /// Marks the item invalid; returns the loop it was on, to be told.
    mutating func invalidate() -> ThreadLoop? {
        guard isValid else { return nil }
        isValid = false
        return loop
    }
}

/// The lock around an item's `Attachment`, shared by reference so every kind of item
/// can hand it to the loop the same way.
final class AttachmentLock: Sendable {
    private let state = Locked(Attachment())

    func withLock<R, E: Error>(_ body: (inout Attachment) throws(E) -> R) throws(E) -> R {
        try state.withLock { (a) throws(E) -> R in try body(&a) }
    }
}

/// The kinds of things a mode holds, so that adding and removing them share one path.
enum LoopItem {
    case timer(LoopTimer)
    case observer(LoopObserver)
    case source(LoopSource)
    case descriptor(DescriptorSource)

    var id: ObjectIdentifier {
        switch self {
        case .timer(let item): ObjectIdentifier(item)
        case .observer(let item): ObjectIdentifier(item)
        case .source(let item): ObjectIdentifier(item)
        case .descriptor(let item): ObjectIdentifier(item)
        }
    }

    var attachment: AttachmentLock {
        switch self {
        case .timer(let item): item.attachment
        case .observer(let item): item.attachment
        case .source(let item): item.attachment
        case .descriptor(let item): item.attachment
        }
    }

    func withAttachment<R, E: Error>(_ body: (inout Attachment) throws(E) -> R) throws(E) -> R {
        try attachment.withLock { (a) throws(E) -> R in try body(&a) }
    }
}
