import Dispatch
import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread
import PortKitSystem

@Suite("ThreadLoop: modes, timers, observers")
struct ThreadLoopModeTests {
    /// Runs `mode` for 300 ms; returns how often the timer fired meanwhile.
    private func runs(_ loop: ThreadLoop, _ mode: LoopMode, firing timer: LoopTimer, _ fired: Counter) throws -> Int {
        let before = fired.count
        _ = try loop.run(mode: mode, for: .milliseconds(300))
        return fired.count - before
    }

    @Test func defaultTimerFiresOnlyInDefault() throws {
        try withOwnLoop { loop in
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
    }

    /// A ready descriptor source in three modes fires in each mode it is still in, as it is
    /// taken out of them one by one, the first it was added to first; out of all, in none.
    @Test func aDescriptorSourceFiresInTheModesItIsStillIn() throws {
        try withOwnLoop { loop in
            let pipe = try FileDescriptor.pipe(nonBlocking: true)
            defer {
                try? pipe.read.close()
                try? pipe.write.close()
            }
            _ = try [UInt8(1)].withUnsafeBytes { try pipe.write.write($0) }
            let fired = Counter()
            let source = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in fired.increment() }
            defer { source.invalidate() }
            let modes: [LoopMode] = ["first", "second", "third"]
            let keep = keepAlive()
            for mode in modes {
                try loop.add(source, forMode: mode)
                try loop.add(source, forMode: mode)  // twice: still once in the mode
                try loop.add(keep, forMode: mode)
            }
            defer { keep.invalidate() }
            func firesIn(_ mode: LoopMode) throws -> Bool {
                let before = fired.count
                _ = try loop.run(mode: mode, for: .milliseconds(200))
                return fired.count > before
            }
            #expect(try modes.map(firesIn) == [true, true, true])
            loop.remove(source, forMode: "first")
            #expect(try modes.map(firesIn) == [false, true, true])
            loop.remove(source, forMode: "third")
            #expect(try modes.map(firesIn) == [false, true, false])
            loop.remove(source, forMode: "second")
            #expect(try modes.map(firesIn) == [false, false, false])
            try loop.add(source, forMode: "third")
            #expect(try modes.map(firesIn) == [false, false, true])
        }
    }

    /// The modes an item is in: each once, in the order added, the first removable while
    /// others stay.
    @Test func anItemsModesHoldEachModeOnceInOrder() {
        var modes = ItemModes()
        #expect(modes.isEmpty && modes.count == 0)
        for mode: LoopMode in ["a", "b", "a", "c", "b"] { modes.insert(mode) }
        #expect(Array(modes) == ["a", "b", "c"])
        modes.remove("a")
        #expect(Array(modes) == ["b", "c"] && modes.count == 2)
        modes.remove("c")
        modes.remove("x")
        #expect(Array(modes) == ["b"])
        modes.remove("b")
        #expect(modes.isEmpty && Array(modes).isEmpty)
    }

    @Test func commonTimerFiresInEveryCommonMode() throws {
        try withOwnLoop { loop in
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
    }

    @Test func observerSeesExactlyOnePassThatHandlesATimer() throws {
        try withOwnLoop { loop in
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
    }

    @Test func observersRunByOrderAndOnceWhenNotRepeating() throws {
        try withOwnLoop { loop in
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
    }

    @Test func overrunningRepeatingTimerSkipsMissedFires() throws {
        try withOwnLoop { loop in
            // (scheduled date, time the handler ran, time the handler returned)
            let fires = Recorder<(scheduled: ContinuousClock.Instant, ran: ContinuousClock.Instant, returned: ContinuousClock.Instant)>()
            let timer = LoopTimer(after: .milliseconds(10), repeating: .milliseconds(10)) { timer in
                let scheduled = timer.fireDate, ran = ContinuousClock.now
                if fires.count == 0 {
                    // The overrun under test: a handler that blocks for 35 ms.
                    while ContinuousClock.now < ran + .milliseconds(35) {}
                }
                fires.append((scheduled, ran, .now))
                if fires.count == 3 { timer.invalidate() }
            }
            try loop.add(timer, forMode: .default)
            #expect(try loop.run(mode: .default, until: .now + .seconds(60)) == .finished)
            let f = fires.all
            try #require(f.count == 3)
            // Once, not a burst: the fire after the overrun is a date of the schedule that was
            // still in the future when the handler returned (the 3 missed dates are skipped).
            #expect(f[1].scheduled > f[0].returned)
            #expect(f[1].scheduled - f[0].scheduled >= .milliseconds(40))
            for i in 1..<3 {
                let periods = (f[i].scheduled - f[0].scheduled) / .milliseconds(10)
                #expect(abs(periods - periods.rounded()) < 0.001, "fire \(i) is on the schedule")
                #expect(f[i].ran >= f[i].scheduled)
            }
            #expect(f[2].scheduled > f[1].scheduled)
        }
    }

    @Test func timerToleranceAndFireOrder() throws {
        try withOwnLoop { loop in
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
    }

    @Test func invalidatedTimerNeverFires() throws {
        try withOwnLoop { loop in
            let fired = Counter()
            let timer = LoopTimer(after: .milliseconds(1)) { _ in fired.increment() }
            try loop.add(timer, forMode: "inv")
            timer.invalidate()
            #expect(try loop.run(mode: "inv", until: .now + .seconds(60)) == .finished)
            #expect(fired.count == 0)
        }
    }

    @Test func blocksWaitForTheirMode() throws {
        try withOwnLoop { loop in
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
}
