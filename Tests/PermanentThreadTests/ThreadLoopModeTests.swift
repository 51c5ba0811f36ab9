import Dispatch
import Synchronization
import Testing
@testable import PermanentThread

@Suite("ThreadLoop: modes, timers, observers")
struct ThreadLoopModeTests {
    /// Runs `mode` for 300 ms; returns how often the timer fired meanwhile.
    private func runs(_ loop: ThreadLoop, _ mode: LoopMode, firing timer: LoopTimer, _ fired: Counter) throws -> Int {
        let before = fired.count
        _ = try loop.run(mode: mode, for: .milliseconds(300))
        return fired.count - before
    }

    @Test func defaultTimerFiresOnlyInDefault() throws {
        let loop = ThreadLoop.current
        let fired = Counter()
        let keep = keepAlive()
        try loop.add(keep, forMode: "tracking")
        defer { keep.invalidate() }
        let timer = LoopTimer(after: .milliseconds(5), repeating: .milliseconds(5)) { _ in fired.increment() }
        try loop.add(timer, forMode: .default)
        defer { timer.invalidate() }
        #expect(try runs(loop, "tracking", firing: timer, fired) == 0)
        #expect(try runs(loop, .default, firing: timer, fired) > 0)
    }

    @Test func commonTimerFiresInEveryCommonMode() throws {
        let loop = ThreadLoop.current
        let fired = Counter()
        let timer = LoopTimer(after: .milliseconds(5), repeating: .milliseconds(5)) { _ in fired.increment() }
        try loop.add(timer, forMode: .common)
        defer { timer.invalidate() }
        let keep = keepAlive()
        try loop.add(keep, forMode: "later-common")
        defer { keep.invalidate() }
        #expect(try runs(loop, .default, firing: timer, fired) > 0)
        #expect(try runs(loop, "later-common", firing: timer, fired) == 0)
        loop.addCommonMode("later-common")
        #expect(try runs(loop, "later-common", firing: timer, fired) > 0)
    }

    @Test func observerSeesExactlyOnePassThatHandlesATimer() throws {
        let loop = ThreadLoop.current
        let events = Recorder<String>()
        let observer = LoopObserver(activities: .all) { _, activity in events.append(activity.description) }
        try loop.add(observer, forMode: "observed")
        defer { observer.invalidate() }
        let timer = LoopTimer(after: .milliseconds(20)) { _ in events.append("timer") }
        try loop.add(timer, forMode: "observed")
        #expect(try loop.run(mode: "observed", until: .now + .seconds(60)) == .finished)
        #expect(events.all == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer", "exit"])
        #expect(!timer.isValid)
    }

    @Test func observersRunByOrderAndOnceWhenNotRepeating() throws {
        let loop = ThreadLoop.current
        let events = Recorder<String>()
        let late = LoopObserver(activities: .entry, order: 10) { _, _ in events.append("late") }
        let early = LoopObserver(activities: .entry, order: -5) { _, _ in events.append("early") }
        let once = LoopObserver(activities: .entry, repeats: false, order: 0) { _, _ in events.append("once") }
        for o in [late, early, once] { try loop.add(o, forMode: "ordered") }
        defer { late.invalidate(); early.invalidate() }
        let keep = keepAlive()
        try loop.add(keep, forMode: "ordered")
        defer { keep.invalidate() }
        _ = try loop.run(mode: "ordered", for: .zero)
        _ = try loop.run(mode: "ordered", for: .zero)
        #expect(events.all == ["early", "once", "late", "early", "late"])
        #expect(!once.isValid)
    }

    @Test func overrunningRepeatingTimerSkipsMissedFires() throws {
        let loop = ThreadLoop.current
        let fires = Recorder<ContinuousClock.Instant>()
        let timer = LoopTimer(after: .milliseconds(10), repeating: .milliseconds(10)) { timer in
            fires.append(.now)
            if fires.count == 1 {
                // The overrun under test: a handler that blocks for 35 ms.
                let end = ContinuousClock.now + .milliseconds(35)
                while ContinuousClock.now < end {}
            }
            if fires.count == 3 { timer.invalidate() }
        }
        try loop.add(timer, forMode: .default)
        #expect(try loop.run(mode: .default, until: .now + .seconds(60)) == .finished)
        let times = fires.all
        try #require(times.count == 3)
        // No burst: the second fire comes at a later date of the schedule, not at once.
        #expect(times[1] - times[0] >= .milliseconds(35))
        #expect(times[2] - times[1] >= .milliseconds(5))
    }

    @Test func timerToleranceAndFireOrder() throws {
        let loop = ThreadLoop.current
        let order = Recorder<Int>()
        let now = ContinuousClock.now
        for i in 0..<5 {
            let timer = LoopTimer(fireAt: now + .milliseconds(20)) { _ in order.append(i) }
            try loop.add(timer, forMode: "fifo")
        }
        let tolerant = LoopTimer(fireAt: now + .milliseconds(1), tolerance: .milliseconds(10)) { _ in order.append(99) }
        try loop.add(tolerant, forMode: "fifo")
        #expect(try loop.run(mode: "fifo", until: .now + .seconds(60)) == .finished)
        #expect(order.all == [99, 0, 1, 2, 3, 4])
    }

    @Test func invalidatedTimerNeverFires() throws {
        let loop = ThreadLoop.current
        let fired = Counter()
        let timer = LoopTimer(after: .milliseconds(1)) { _ in fired.increment() }
        try loop.add(timer, forMode: "inv")
        timer.invalidate()
        #expect(try loop.run(mode: "inv", until: .now + .seconds(60)) == .finished)
        #expect(fired.count == 0)
    }

    @Test func blocksWaitForTheirMode() throws {
        let loop = ThreadLoop.current
        let order = Recorder<String>()
        let keep = keepAlive()
        try loop.add(keep, forMode: .common)
        try loop.add(keep, forMode: "special")
        defer { keep.invalidate() }
        try loop.perform(inModes: ["special"]) { order.append("special") }
        try loop.perform { order.append("common") }
        _ = try loop.run(mode: .default, for: .milliseconds(1))
        #expect(order.all == ["common"])
        _ = try loop.run(mode: "special", for: .milliseconds(1))
        #expect(order.all == ["common", "special"])
    }
}
