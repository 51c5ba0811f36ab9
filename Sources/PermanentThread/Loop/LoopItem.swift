import Synchronization
import PortKitLocks

/// Where a timer, observer or source is scheduled: shared by every kind of loop item.
///
/// An item belongs to at most one loop; it can be in several of that loop's modes.
struct Attachment {
    weak var loop: ThreadLoop?
    var isValid = true
    /// The real modes (never `common`) the item is in on its loop. Loop thread only.
    var modes = ItemModes()
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
typealias AttachmentLock = Locked<Attachment>

/// The real modes an item is in: most items are in one, which is held inline (no set to
/// make and no name to hash when a source is added or removed); more go in an array.
struct ItemModes: Sequence {
    private var first: LoopMode?
    private var others: [LoopMode] = []

    var isEmpty: Bool { first == nil }
    var count: Int { first == nil ? 0 : 1 + others.count }

    /// Adds `mode` if it is not here yet.
    mutating func insert(_ mode: LoopMode) {
        guard let first else { return self.first = mode }
        if first != mode && !others.contains(mode) { others.append(mode) }
    }

    /// Removes `mode` if it is here.
    mutating func remove(_ mode: LoopMode) {
        if first == mode {
            first = others.isEmpty ? nil : others.removeFirst()
        } else if let index = others.firstIndex(of: mode) {
            others.remove(at: index)
        }
    }

    /// The modes, the earliest first.
    func makeIterator() -> Iterator { Iterator(first: first, others: others.makeIterator()) }

    /// Walks the inline mode, then the others.
    struct Iterator: IteratorProtocol {
        var first: LoopMode?
        var others: IndexingIterator<[LoopMode]>

        /// The next mode, if any.
        mutating func next() -> LoopMode? {
            if let mode = first {
                first = nil
                return mode
            }
            return others.next()
        }
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
