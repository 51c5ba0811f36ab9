import CPortKitSystem
import Glibc
import Synchronization

/// The fixed sizes of a `WorkQueue` segment.
private enum Geometry {
    /// Positions per segment, a power of two: the slots, then the sentinel.
    static let lap = 64
    /// Slots per segment that hold an element.
    static let slots = lap - 1
    /// The bit of `tailIndex` that says the queue is closed.
    static let closed = 1
    /// How far `tailIndex` moves per position.
    static let step = 2
    /// Bytes before the first slot: the `next` pointer, on its own cache line.
    static let header = 64
}

/// The inbox of a loop: an unbounded queue with any number of producers and one consumer,
/// kept in linked fixed-size segments (crossbeam's `SegQueue`, made single-consumer), that
/// allocates nothing per element and takes no lock.
///
/// A producer reserves a slot with one compare-and-exchange on `tailIndex`, then writes the
/// element into it and marks it written; a producer preempted anywhere stalls nobody but
/// the consumer, and that only when the consumer reaches that very slot. The consumer (the
/// loop's thread) takes the elements in the order their slots were reserved: FIFO for each
/// producer, and causal across producers.
///
/// `tailIndex` is a position shifted left by one, with the "closed" mark in bit 0. Each
/// segment spans `Geometry.lap` positions: `Geometry.slots` slots, then a sentinel position
/// no element takes. A tail at a sentinel says the segment is full and the producer that
/// took its last slot is installing the next one (it then moves the tail past the sentinel).
///
/// Freeing segments needs no reclamation scheme, for only the consumer frees one, and only
/// after it took the element of every slot in it:
/// - a producer dereferences a segment only after its compare-and-exchange reserved a slot
///   in it (it loads the segment's address before, but the exchange fails, and the address
///   is dropped unread, if the tail moved meanwhile, and the tail moves past a segment only
///   once all of its slots are reserved);
/// - what such a producer does to the segment is, in order: store `next` (only the one that
///   took the last slot), write its element, store the slot's written flag (releasing). The
///   flag is its last touch;
/// - the consumer frees a segment after its acquiring load saw the written flag of every
///   slot in it, so after each producer's last touch. A segment kept for reuse is handed
///   back through `spareSegment`, whose exchange orders its reset before its reuse.
// Safety of @unchecked Sendable: the producer side is only `tailIndex`, `tailSegment` and
// `spareSegment` (atomics) and the slots a producer reserved (its own until it stores their
// written flag, releasing); the consumer side (`consumer`, the pointee of a let) is touched
// by the one consumer thread only, which reads a slot after an acquiring load of its flag;
// `publishedHead` is an atomic.
final class WorkQueue<Element: Sendable>: @unchecked Sendable {

    // MARK: Producers

    /// Position << 1 | closed.
    private let tailIndex = Atomic<Int>(0)
    /// The segment the tail position is in (or, while a tail is at a sentinel, the one being
    /// installed after it).
    private let tailSegment: Atomic<UnsafeMutableRawPointer?>
    /// One emptied segment the consumer keeps for the next producer that needs one.
    private let spareSegment = Atomic<UnsafeMutableRawPointer?>(nil)

    /// Keeps the consumer's fields off the producers' cache line.
    private let padding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)

    // MARK: Consumer only

    /// Where the consumer is.
    private struct Consumer {
        /// The position of the next element to take.
        var head = 0
        /// The segment `head` is in.
        var segment: UnsafeMutableRawPointer
        /// A tail position seen earlier: the positions before it are reserved.
        var knownTail = 0
    }

    /// The consumer's state, out of line: read and written through a pointer, it costs no
    /// dynamic exclusivity check per element (class properties would).
    private let consumer: UnsafeMutablePointer<Consumer>
    /// `consumer.head`, for other threads (`isEmpty`).
    private let publishedHead = Atomic<Int>(0)

    /// Makes an empty, open queue.
    init() {
        let first = Self.allocateSegment()
        tailSegment = Atomic(first)
        consumer = .allocate(capacity: 1)
        consumer.initialize(to: Consumer(segment: first))
    }

    deinit {
        // No producer holds the queue any more: every reserved slot has been written.
        while pop() != nil {}
        Self.deallocateSegment(consumer.pointee.segment)
        consumer.deinitialize(count: 1)
        consumer.deallocate()
        if let spare = spareSegment.load(ordering: .acquiring) { Self.deallocateSegment(spare) }
    }

    // MARK: Segments

    /// Bytes from one slot to the next: the element, then its written flag.
    private static var slotStride: Int {
        let size = MemoryLayout<Element>.size + 1
        let alignment = MemoryLayout<Element>.alignment
        return (size + alignment - 1) / alignment * alignment
    }

    private static func allocateSegment() -> UnsafeMutableRawPointer {
        let segment = UnsafeMutableRawPointer.allocate(
            byteCount: Geometry.header + Geometry.slots * slotStride, alignment: 64)
        segment.bindMemory(to: Atomic<UnsafeMutableRawPointer?>.self, capacity: 1).initialize(to: Atomic(nil))
        for offset in 0..<Geometry.slots {
            let slot = segment + Geometry.header + offset * slotStride
            slot.bindMemory(to: Element.self, capacity: 1)
            (slot + MemoryLayout<Element>.size).bindMemory(to: Atomic<UInt8>.self, capacity: 1).initialize(to: Atomic(0))
        }
        return segment
    }

    /// Frees a segment whose slots hold no element.
    private static func deallocateSegment(_ segment: UnsafeMutableRawPointer) {
        // Atomics are trivial: no deinitialization needed.
        segment.deallocate()
    }

    @inline(__always)
    private static func next(_ segment: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UnsafeMutableRawPointer?>> {
        segment.assumingMemoryBound(to: Atomic<UnsafeMutableRawPointer?>.self)
    }

    @inline(__always)
    private static func element(_ segment: UnsafeMutableRawPointer, _ offset: Int) -> UnsafeMutablePointer<Element> {
        (segment + Geometry.header + offset * slotStride).assumingMemoryBound(to: Element.self)
    }

    @inline(__always)
    private static func written(_ segment: UnsafeMutableRawPointer, _ offset: Int) -> UnsafeMutablePointer<Atomic<UInt8>> {
        (segment + Geometry.header + offset * slotStride + MemoryLayout<Element>.size)
            .assumingMemoryBound(to: Atomic<UInt8>.self)
    }

    /// A segment for the tail: the spare one if the consumer left one, else a new one.
    private func takeSegment() -> UnsafeMutableRawPointer {
        if spareSegment.load(ordering: .relaxed) != nil, let spare = spareSegment.exchange(nil, ordering: .acquiring) {
            return spare
        }
        return Self.allocateSegment()
    }

    /// Hands back a segment a producer took but did not install.
    private func giveBack(_ segment: UnsafeMutableRawPointer) {
        let (kept, _) = spareSegment.compareExchange(expected: nil, desired: segment, ordering: .releasing)
        if !kept { Self.deallocateSegment(segment) }
    }

    /// Called by the consumer for a segment it has emptied: kept as the spare or freed.
    private func retire(_ segment: UnsafeMutableRawPointer) {
        // Only the consumer stores a segment in `spareSegment`; producers only take it.
        guard spareSegment.load(ordering: .relaxed) == nil else {
            Self.deallocateSegment(segment)
            return
        }
        Self.next(segment).pointee.store(nil, ordering: .relaxed)
        for offset in 0..<Geometry.slots { Self.written(segment, offset).pointee.store(0, ordering: .relaxed) }
        spareSegment.store(segment, ordering: .releasing)
    }

    /// Waits, briefly spinning then yielding the CPU, for another thread to move on.
    @inline(__always)
    private static func backOff(_ spins: inout Int) {
        if spins < 100 {
            spins += 1
            portkit_cpu_relax()
        } else {
            sched_yield()
        }
    }

    // MARK: Any thread

    /// Adds the element `make` returns at the tail, unless the queue is closed; with
    /// `closing`, closes the queue in the same step (no element can come after it).
    ///
    /// `make` runs only once a slot is reserved, and its result is moved into the slot.
    /// Sequentially consistent: a consumer that says it sleeps, then looks at the tail, and
    /// a producer that pushes, then looks at the consumer's state, cannot miss each other.
    /// - Returns: false if the queue was closed (`make` did not run).
    @inline(__always)
    func push(closing: Bool = false, _ make: () -> Element) -> Bool {
        var index = tailIndex.load(ordering: .acquiring)
        var nextSegment: UnsafeMutableRawPointer? = nil
        var spins = 0
        while true {
            guard index & Geometry.closed == 0 else {
                if let nextSegment { giveBack(nextSegment) }
                return false
            }
            let offset = (index >> 1) & (Geometry.lap - 1)
            if offset == Geometry.slots {
                // Full: the producer that took the last slot is installing the next segment.
                Self.backOff(&spins)
                index = tailIndex.load(ordering: .acquiring)
                continue
            }
            // The segment of `index` whenever the exchange below succeeds (see the type's
            // comment): it moves on only after the tail has.
            let segment = tailSegment.load(ordering: .acquiring).unsafelyUnwrapped
            let takesLast = offset + 1 == Geometry.slots
            // Allocated before the tail moves, so others wait at the sentinel only briefly.
            if takesLast && nextSegment == nil { nextSegment = takeSegment() }
            let desired = (index + Geometry.step) | (closing ? Geometry.closed : 0)
            let (exchanged, original) = tailIndex.compareExchange(
                expected: index, desired: desired, ordering: .sequentiallyConsistent)
            guard exchanged else {
                index = original
                continue
            }
            if takesLast {
                let next = nextSegment.unsafelyUnwrapped
                tailSegment.store(next, ordering: .releasing)
                // Past the sentinel: producers may take the new segment's slots.
                tailIndex.add(Geometry.step, ordering: .releasing)
                // Before this slot's written flag: the consumer finds `next` set once it has
                // taken the last element.
                Self.next(segment).pointee.store(next, ordering: .releasing)
            } else if let nextSegment {
                giveBack(nextSegment)
            }
            Self.element(segment, offset).initialize(to: make())
            Self.written(segment, offset).pointee.store(1, ordering: .releasing)
            return true
        }
    }

    /// Closes the queue: every later `push` fails. Says whether it was open.
    @discardableResult
    func close() -> Bool {
        tailIndex.bitwiseOr(Geometry.closed, ordering: .sequentiallyConsistent).oldValue & Geometry.closed == 0
    }

    /// Whether the queue is closed.
    var isClosed: Bool { tailIndex.load(ordering: .acquiring) & Geometry.closed != 0 }

    /// Whether no element waits (counting those reserved but not yet written). A snapshot
    /// from any thread; exact on the consumer's thread between its `pop`s.
    var isEmpty: Bool {
        let head = publishedHead.load(ordering: .acquiring)
        return tailIndex.load(ordering: .acquiring) >> 1 <= head
    }

    // MARK: Consumer only

    /// Whether an element waits or is being written: for the consumer's thread, before it
    /// sleeps. Sequentially consistent, the other half of `push`'s handshake.
    var hasWaiting: Bool {
        tailIndex.load(ordering: .sequentiallyConsistent) >> 1 > consumer.pointee.head
    }

    /// The tail's position now: `pop(before:)` with it takes what was pushed so far, not
    /// what comes later. Consumer's thread only.
    var tailPosition: Int {
        let tail = tailIndex.load(ordering: .acquiring) >> 1
        consumer.pointee.knownTail = tail
        return tail
    }

    /// Takes the element at the head, waiting for its producer to finish writing it if it
    /// is reserved but not written yet; nil if the queue is empty. Consumer's thread only.
    ///
    /// The queue's state is settled before the element is returned, so whatever the caller
    /// does with it may pop again.
    @inline(__always)
    func pop() -> Element? {
        pop(before: Int.max)
    }

    /// `pop()`, but nil once the head reaches `end` (a `tailPosition`), even if more came.
    @inline(__always)
    func pop(before end: Int) -> Element? {
        let state = consumer
        let head = state.pointee.head
        guard head < end else { return nil }
        if head >= state.pointee.knownTail {
            let tail = tailIndex.load(ordering: .acquiring) >> 1
            state.pointee.knownTail = tail
            guard head < tail else { return nil }
        }
        let segment = state.pointee.segment
        let offset = head & (Geometry.lap - 1)
        let flag = Self.written(segment, offset)
        if flag.pointee.load(ordering: .acquiring) == 0 {
            // Reserved, not yet written: its producer is between its exchange and its store.
            var spins = 0
            repeat { Self.backOff(&spins) } while flag.pointee.load(ordering: .acquiring) == 0
        }
        let element = Self.element(segment, offset).move()
        let newHead: Int
        if offset + 1 == Geometry.slots {
            // The producer of the last slot set `next` before its written flag.
            state.pointee.segment = Self.next(segment).pointee.load(ordering: .acquiring).unsafelyUnwrapped
            newHead = head + 2
            retire(segment)
        } else {
            newHead = head + 1
        }
        state.pointee.head = newHead
        publishedHead.store(newHead, ordering: .releasing)
        return element
    }
}
