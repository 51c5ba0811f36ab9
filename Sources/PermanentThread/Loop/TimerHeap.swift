/// A binary min-heap of timer entries ordered by the latest date each may fire
/// (fire date plus tolerance), ties broken by insertion order so that equal dates fire
/// first-in first-out.
///
/// Entries are never removed from the middle: a rescheduled or removed timer leaves a
/// stale entry (older generation) that is skipped when it reaches the top.
struct TimerHeap {
    struct Entry {
        var fireDate: ContinuousClock.Instant
        var latest: ContinuousClock.Instant
        var sequence: UInt64
        var generation: UInt64
        var timer: LoopTimer

        func precedes(_ other: Entry) -> Bool {
            latest != other.latest ? latest < other.latest : sequence < other.sequence
        }
    }

    private(set) var entries: [Entry] = []

    var top: Entry? { entries.first }
    var isEmpty: Bool { entries.isEmpty }

    mutating func push(_ entry: Entry) {
        entries.append(entry)
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].precedes(entries[parent]) else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    @discardableResult
    mutating func pop() -> Entry? {
        guard !entries.isEmpty else { return nil }
        entries.swapAt(0, entries.count - 1)
        let top = entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var first = parent
            if left < entries.count && entries[left].precedes(entries[first]) { first = left }
            if right < entries.count && entries[right].precedes(entries[first]) { first = right }
            if first == parent { break }
            entries.swapAt(parent, first)
            parent = first
        }
        return top
    }

    mutating func removeAll() { entries.removeAll() }
}
