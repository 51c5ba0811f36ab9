/// The timers of one mode: a binary min-heap of entries ordered by the latest date each may
/// fire (fire date plus tolerance), ties broken by insertion order so that equal dates fire
/// first-in first-out.
///
/// Every member timer has one entry (none only while it is being fired, between `popTop` and
/// `reschedule` or `remove`), and each knows where its entry is: a member's slot holds the
/// entry's index, kept up to date as entries move. So removing a timer takes its entry out
/// at once, wherever it sits, and with it the last reference to the timer and its handler:
/// nothing waits for the date of a timer that was removed or invalidated.
struct TimerHeap {
    struct Entry {
        var fireDate: ContinuousClock.Instant
        var latest: ContinuousClock.Instant
        var sequence: UInt64
        var timer: LoopTimer
        /// The member's slot in `positions` and `owners`.
        var slot: Int

        func precedes(_ other: Entry) -> Bool {
            latest != other.latest ? latest < other.latest : sequence < other.sequence
        }
    }

    private(set) var entries: [Entry] = []
    /// Per slot: the index of its entry in `entries`, or -1 while its timer is being fired.
    private var positions: [Int] = []
    /// Per slot: its timer, or nil for a free slot.
    private var owners: [LoopTimer?] = []
    private var freeSlots: [Int] = []
    /// The slot of each member.
    private var slots: [ObjectIdentifier: Int] = [:]
    private var sequence: UInt64 = 0

    /// The entry that fires first.
    var top: Entry? { entries.first }
    /// Whether the mode has no timer (a timer being fired still counts).
    var isEmpty: Bool { slots.isEmpty }
    /// The member timers.
    var members: [LoopTimer] { owners.compactMap { $0 } }

    /// Makes `timer` a member, with an entry at its fire date; false if it was one already.
    mutating func insert(_ timer: LoopTimer) -> Bool {
        let id = ObjectIdentifier(timer)
        guard slots[id] == nil else { return false }
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            owners[slot] = timer
        } else {
            slot = positions.count
            positions.append(-1)
            owners.append(timer)
        }
        slots[id] = slot
        push(timer, slot: slot)
        return true
    }

    /// Takes `timer` out, entry and all; false if it was not a member.
    mutating func remove(_ timer: LoopTimer) -> Bool {
        guard let slot = slots.removeValue(forKey: ObjectIdentifier(timer)) else { return false }
        let position = positions[slot]
        if position >= 0 { removeEntry(at: position) }
        positions[slot] = -1
        owners[slot] = nil
        freeSlots.append(slot)
        if slots.isEmpty {
            self = TimerHeap()
        } else if positions.count > 1024 && slots.count * 4 < positions.count {
            compact()
        }
        return true
    }

    /// Takes the top entry off; its timer stays a member, without an entry, until
    /// `reschedule` gives it one again or `remove` takes it out.
    mutating func popTop() -> Entry {
        let top = entries[0]
        removeEntry(at: 0)
        positions[top.slot] = -1
        return top
    }

    /// Moves a member's entry to the timer's fire date now (or gives it one again after
    /// `popTop`), after the entries of the same date; does nothing for a non-member.
    mutating func reschedule(_ timer: LoopTimer) {
        guard let slot = slots[ObjectIdentifier(timer)] else { return }
        let position = positions[slot]
        if position >= 0 { removeEntry(at: position) }
        push(timer, slot: slot)
    }

    private mutating func push(_ timer: LoopTimer, slot: Int) {
        sequence &+= 1
        let date = timer.fireDate
        entries.append(Entry(fireDate: date, latest: date + timer.tolerance, sequence: sequence, timer: timer, slot: slot))
        positions[slot] = entries.count - 1
        siftUp(entries.count - 1)
    }

    /// Removes the entry at `index`; the caller updates that entry's slot.
    private mutating func removeEntry(at index: Int) {
        let last = entries.removeLast()
        guard index < entries.count else { return }
        entries[index] = last
        positions[last.slot] = index
        siftDown(siftUp(index))
    }

    /// Moves the entry at `start` up to its place; returns where it landed. The entry is
    /// held aside while the ones it passes move down, so each level writes one entry and
    /// one position, not a swap's two of each.
    @discardableResult
    private mutating func siftUp(_ start: Int) -> Int {
        var child = start
        let moving = entries[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard moving.precedes(entries[parent]) else { break }
            place(entries[parent], at: child)
            child = parent
        }
        if child != start { place(moving, at: child) }
        return child
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let moving = entries[parent]
        let count = entries.count
        while true {
            let left = 2 * parent + 1, right = left + 1
            guard left < count else { break }
            let first = right < count && entries[right].precedes(entries[left]) ? right : left
            guard entries[first].precedes(moving) else { break }
            place(entries[first], at: parent)
            parent = first
        }
        if parent != start { place(moving, at: parent) }
    }

    private mutating func place(_ entry: Entry, at index: Int) {
        entries[index] = entry
        positions[entry.slot] = index
    }

    /// Renumbers the slots densely and gives back the room of a heap that was much larger:
    /// once most timers of a burst are gone, their slots and entries stop costing memory.
    private mutating func compact() {
        var newPositions: [Int] = []
        var newOwners: [LoopTimer?] = []
        var newSlots: [ObjectIdentifier: Int] = [:]
        newPositions.reserveCapacity(slots.count)
        newOwners.reserveCapacity(slots.count)
        newSlots.reserveCapacity(slots.count)
        for (slot, owner) in owners.enumerated() {
            guard let owner else { continue }
            let renumbered = newOwners.count
            newOwners.append(owner)
            newPositions.append(positions[slot])
            newSlots[ObjectIdentifier(owner)] = renumbered
            if positions[slot] >= 0 { entries[positions[slot]].slot = renumbered }
        }
        var newEntries: [Entry] = []
        newEntries.reserveCapacity(entries.count)
        newEntries.append(contentsOf: entries)
        (entries, positions, owners, slots, freeSlots) = (newEntries, newPositions, newOwners, newSlots, [])
    }
}
