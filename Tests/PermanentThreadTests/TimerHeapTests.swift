import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread

/// Counts the deinits of the objects a test's timer handlers capture.
private final class Tracked: Sendable {
    let deinits: Counter
    init(_ deinits: Counter) { self.deinits = deinits }
    deinit { deinits.increment() }
}

@Suite("ThreadLoop: the timer heap")
struct TimerHeapTests {
    /// Inserts, removals and reschedules in a seeded random mix; the heap must pop what a
    /// sorted reference list says: by latest date, then first-in first-out.
    @Test(arguments: [1, 2, 3])
    func popsInDateOrderThenFIFOWhateverWasRemoved(seed: UInt64) {
        var random = seed &* 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            random ^= random << 13; random ^= random >> 7; random ^= random << 17
            return Int(random % UInt64(bound))
        }
        let base = ContinuousClock.now
        var heap = TimerHeap()
        var reference: [(date: ContinuousClock.Instant, sequence: Int, timer: LoopTimer)] = []
        var sequence = 0
        for _ in 0..<5000 {
            switch next(10) {
            case 0..<6:
                // Few distinct dates, so that ties are common.
                let timer = LoopTimer(fireAt: base + .milliseconds(next(50))) { _ in }
                let inserted = heap.insert(timer), again = heap.insert(timer)
                #expect(inserted && !again)
                sequence += 1
                reference.append((timer.fireDate, sequence, timer))
            case 6..<9 where !reference.isEmpty:
                let victim = reference.remove(at: next(reference.count)).timer
                let removed = heap.remove(victim), again = heap.remove(victim)
                #expect(removed && !again)
            case 9 where !reference.isEmpty:
                let index = next(reference.count)
                let moved = reference[index].timer
                moved.setFireDate(base + .milliseconds(next(50)))
                heap.reschedule(moved)
                sequence += 1
                reference[index] = (moved.fireDate, sequence, moved)
            default:
                break
            }
        }
        reference.sort { $0.date != $1.date ? $0.date < $1.date : $0.sequence < $1.sequence }
        var popped: [ObjectIdentifier] = []
        while heap.top != nil {
            let entry = heap.popTop()
            popped.append(ObjectIdentifier(entry.timer))
            let removed = heap.remove(entry.timer)
            #expect(removed)
        }
        #expect(popped == reference.map { ObjectIdentifier($0.timer) })
        #expect(heap.isEmpty)
    }

    /// Invalidated timers let go of their handlers at once, not when the loop reaches their
    /// dates: an earlier timer that stays keeps nothing else alive.
    @Test func invalidatedTimersReleaseTheirHandlersWhileAnEarlierTimerStays() throws {
        let count = 100_000
        let deinits = Counter()
        let fired = Counter()
        let worker = LoopThread.runningDefaultMode(name: "timer-release")
        let loop = worker.loop
        let earlier = LoopTimer(after: .seconds(3600)) { _ in fired.increment() }
        try loop.add(earlier, forMode: .default)
        var timers: [LoopTimer] = []
        timers.reserveCapacity(count)
        for _ in 0..<count {
            let tracked = Tracked(deinits)
            let timer = LoopTimer(after: .seconds(7200)) { _ in _ = tracked; fired.increment() }
            try loop.add(timer, forMode: .default)
            timers.append(timer)
        }
        for timer in timers { timer.invalidate() }
        timers = []
        #expect(eventually(timeout: .seconds(60)) { deinits.count == count })
        #expect(earlier.isValid)
        #expect(fired.count == 0)
        earlier.invalidate()
        loop.stop()
        #expect(worker.join(timeout: .seconds(60)))
    }
}
