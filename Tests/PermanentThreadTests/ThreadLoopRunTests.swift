import Dispatch
import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread
import PortKitLocks

@Suite("ThreadLoop: running, results, stop, nesting")
struct ThreadLoopRunTests {
    @Test func emptyModeFinishesAtOnce() throws {
        // On a thread of its own: a test's thread of the shared pool may have run other
        // tests' loops, and only a new thread's loop is sure to have nothing in its default
        // mode.
        let results = Recorder<LoopRunResult?>()
        let start = ContinuousClock.now
        let thread = LoopThread(name: "empty-loop") { loop in
            results.append(try? loop.run(mode: "nothing-here", until: .now + .seconds(30)))
            results.append(try? loop.run(mode: .default, until: nil))
        }
        #expect(thread.join(timeout: .seconds(120)))
        #expect(results.all == [.finished, .finished])
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    @Test func pastDeadlinePollsOnceAndTimesOut() throws {
        try withOwnLoop { loop in
            let source = keepAlive()
            try loop.add(source, forMode: "poll")
            defer { source.invalidate() }
            let start = ContinuousClock.now
            #expect(try loop.run(mode: "poll", until: .now - .seconds(1)) == .timedOut)
            #expect(try loop.run(mode: "poll", for: .zero) == .timedOut)
            #expect(ContinuousClock.now - start < .seconds(5))
        }
    }

    @Test func deadlineEndsARunThatHasASource() throws {
        try withOwnLoop { loop in
            let source = keepAlive()
            try loop.add(source, forMode: "deadline")
            defer { source.invalidate() }
            let start = ContinuousClock.now
            #expect(try loop.run(mode: "deadline", for: .milliseconds(50)) == .timedOut)
            #expect(ContinuousClock.now - start >= .milliseconds(50))
        }
    }

    @Test func runFromAnotherThreadIsRefused() throws {
        let worker = LoopThread { _ in }
        #expect(worker.join())
        #expect(throws: ThreadLoopError.notOnLoopThread) { try worker.loop.run(mode: .default, until: nil) }
    }

    @Test func stopFromAnotherThreadEndsTheRun() throws {
        let result = Locked<LoopRunResult?>(nil)
        let running = Atomic<Bool>(false)
        let worker = LoopThread { loop in
            let source = keepAlive()
            try! loop.add(source, forMode: .default)
            try! loop.perform { running.store(true, ordering: .releasing) }
            let r = try! loop.run(mode: .default, until: .now + .seconds(60))
            result.withLock { $0 = r }
        }
        #expect(eventually { running.load(ordering: .acquiring) })
        worker.loop.stop()
        #expect(worker.join())
        #expect(result.withLock { $0 } == .stopped)
    }

    @Test func stopEndsOnlyTheInnermostRun() throws {
        try withOwnLoop { loop in
            let source = keepAlive()
            try loop.add(source, forMode: .common)
            defer { source.invalidate() }
            let order = Recorder<String>()
            try loop.perform {
                order.append("outer block")
                try! loop.perform(inModes: ["inner"]) {
                    order.append("inner block")
                    loop.stop()
                }
                let inner = try! loop.run(mode: "inner", until: .now + .seconds(60))
                order.append("inner returned \(inner)")
                loop.stop()
            }
            loop.addCommonMode("inner")
            let outer = try loop.run(mode: .default, until: .now + .seconds(60))
            order.append("outer returned \(outer)")
            #expect(order.all == ["outer block", "inner block", "inner returned stopped", "outer returned stopped"])
        }
    }

    @Test func stopBeforeRunMakesTheNextRunReturnStopped() throws {
        try withOwnLoop { loop in
            let source = keepAlive()
            try loop.add(source, forMode: .default)
            defer { source.invalidate() }
            loop.stop()
            #expect(try loop.run(mode: .default, until: .now + .seconds(60)) == .stopped)
            #expect(try loop.run(mode: .default, for: .milliseconds(1)) == .timedOut)
        }
    }

    @Test func nestedRunInTheSameMode() throws {
        try withOwnLoop { loop in
            let source = keepAlive()
            try loop.add(source, forMode: .default)
            defer { source.invalidate() }
            let order = Recorder<String>()
            try loop.perform {
                order.append("outer")
                try! loop.perform { order.append("seen by inner"); loop.stop() }
                order.append("inner: \(try! loop.run(mode: .default, until: .now + .seconds(60)))")
                #expect(loop.currentMode == .default)
                loop.stop()
            }
            #expect(try loop.run(mode: .default, until: .now + .seconds(60)) == .stopped)
            #expect(order.all == ["outer", "seen by inner", "inner: stopped"])
            #expect(loop.currentMode == nil)
        }
    }

    @Test func customSourceSignalledFromAnotherThread() throws {
        let performed = Atomic<Int>(0)
        let scheduled = Recorder<String>()
        let source = LoopSource(
            schedule: { _, mode in scheduled.append("schedule \(mode)") },
            cancel: { _, mode in scheduled.append("cancel \(mode)") },
            perform: { performed.add(1, ordering: .relaxed) })
        let result = Locked<LoopRunResult?>(nil)
        let worker = LoopThread { loop in
            try! loop.add(source, forMode: .default)
            let r = try! loop.run(mode: .default, until: .now + .seconds(60), returnAfterSourceHandled: true)
            result.withLock { $0 = r }
            source.invalidate()
        }
        #expect(eventually { scheduled.count == 1 })
        source.signal()
        #expect(worker.join())
        #expect(result.withLock { $0 } == .handledSource)
        #expect(performed.load(ordering: .relaxed) == 1)
        #expect(scheduled.all == ["schedule default", "cancel default"])
        #expect(!source.isValid)
    }

    @Test func anItemBelongsToOneLoop() throws {
        let other = LoopThread { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            _ = try! loop.run(mode: .default, until: .now + .seconds(60))
        }
        try withOwnLoop { loop in
            let timer = LoopTimer(after: .seconds(60)) { _ in }
            try loop.add(timer, forMode: "one-loop")
            #expect(throws: ThreadLoopError.scheduledOnAnotherLoop) { try other.loop.add(timer) }
            timer.invalidate()
            #expect(throws: ThreadLoopError.invalidated) { try loop.add(timer) }
        }
        other.loop.stop()
        #expect(other.join())
        // The loop ends with its thread (just after the body returned).
        #expect(eventually { other.loop.isClosed })
        #expect(throws: ThreadLoopError.loopEnded) { try other.loop.perform {} }
    }
}
