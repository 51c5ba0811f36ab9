import Testing
import PortKitTestSupport
@testable import PermanentThread

/// `limitDate(forMode:)`, asked on a permanent thread's loop: a loop of its own, so no
/// other test's timer is in its modes.
@Suite("ThreadLoop: limitDate(forMode:)")
struct ThreadLoopLimitDateTests {
    /// Runs `body` with the loop, on the loop's thread.
    private func onLoop<T>(_ thread: PermanentThread, _ body: (ThreadLoop) throws -> T) throws -> T {
        try thread.sync { try body(ThreadLoop.current) }  // owned thread
    }

    private func startedThread(_ name: String) throws -> PermanentThread {
        let thread = PermanentThread(name: name)
        try thread.run()
        return thread
    }

    @Test func aModeGivesItsEarliestTimerAndOtherModesNone() throws {
        let thread = try startedThread("limit-mode")
        defer { thread.stop() }
        let now = ContinuousClock.now
        let late = LoopTimer(fireAt: now + .seconds(600)) { _ in }
        let early = LoopTimer(fireAt: now + .seconds(300), tolerance: .seconds(5)) { _ in }
        defer { late.invalidate(); early.invalidate() }
        let dates = try onLoop(thread) { loop in
            try loop.add(late, forMode: "limit-a")
            let one = loop.limitDate(forMode: "limit-a")
            try loop.add(early, forMode: "limit-a")
            return [one, loop.limitDate(forMode: "limit-a"), loop.limitDate(forMode: .default),
                    loop.limitDate(forMode: "limit-b")]
        }
        // The fire date, not the fire date plus the tolerance.
        #expect(dates == [now + .seconds(600), now + .seconds(300), nil, nil])
    }

    @Test func commonTimersCountInEveryCommonModeAndInOnesMadeCommonLater() throws {
        let thread = try startedThread("limit-common")
        defer { thread.stop() }
        let fireDate = ContinuousClock.now + .seconds(400)
        let timer = LoopTimer(fireAt: fireDate) { _ in }
        defer { timer.invalidate() }
        let own = LoopTimer(fireAt: fireDate + .seconds(100)) { _ in }
        defer { own.invalidate() }
        let dates = try onLoop(thread) { loop in
            try loop.add(timer, forMode: .common)
            try loop.add(own, forMode: "limit-later")
            let before = loop.limitDate(forMode: "limit-later")
            loop.addCommonMode("limit-later")
            return [loop.limitDate(forMode: .default), loop.limitDate(forMode: .common), before,
                    loop.limitDate(forMode: "limit-later")]
        }
        #expect(dates == [fireDate, fireDate, fireDate + .seconds(100), fireDate])
    }

    @Test func invalidatedTimersAreNotCounted() throws {
        let thread = try startedThread("limit-invalid")
        defer { thread.stop() }
        let now = ContinuousClock.now
        let first = LoopTimer(fireAt: now + .seconds(100)) { _ in }
        let second = LoopTimer(fireAt: now + .seconds(200)) { _ in }
        try onLoop(thread) { loop in
            try loop.add(first, forMode: .default)
            try loop.add(second, forMode: .default)
        }
        #expect(try onLoop(thread) { $0.limitDate(forMode: .default) } == now + .seconds(100))
        // From another thread: the removal reaches the loop before the block after it.
        first.invalidate()
        #expect(try onLoop(thread) { $0.limitDate(forMode: .default) } == now + .seconds(200))
        let last = try onLoop(thread) { loop in
            second.invalidate()
            return loop.limitDate(forMode: .default)
        }
        #expect(last == nil)
    }

    @Test func aModeWithoutTimersOrAFiredOneShotTimerGivesNone() throws {
        let thread = try startedThread("limit-none")
        defer { thread.stop() }
        let fired = Counter()
        let shot = LoopTimer(after: .milliseconds(1)) { _ in fired.increment() }
        let (empty, pending) = try onLoop(thread) { loop in
            let empty = loop.limitDate(forMode: .default)
            try loop.add(shot, forMode: .default)
            return (empty, loop.limitDate(forMode: .default))
        }
        #expect(empty == nil)
        #expect(pending != nil)
        #expect(eventually { fired.count == 1 })
        #expect(try onLoop(thread) { $0.limitDate(forMode: .default) } == nil)
    }
}
