import Dispatch
import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread
import PortKitLocks

/// CoreFoundation's semantics of signalled custom sources, kept while a pass visits only the
/// sources that were signalled. Each test runs one-pass runs (a deadline in the past) on the
/// test's own loop, in modes of its own.
@Suite("ThreadLoop: signalled custom sources")
struct ThreadLoopSignalTests {
    /// One pass of `mode`, without sleeping.
    private func pass(_ loop: ThreadLoop, _ mode: LoopMode) throws -> LoopRunResult {
        try loop.run(mode: mode, until: .now - .seconds(1))
    }

    /// A source that appends `name` to `log` when performed.
    private func source(_ name: String, order: Int = 0, _ log: Recorder<String>) -> LoopSource {
        LoopSource(order: order, perform: { log.append(name) })
    }

    @Test func aSignalledSourceWaitsForAPassInOneOfItsModes() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let signalled = source("a", log)
            let keep = keepAlive()
            try loop.add(signalled, forMode: "signal-a")
            try loop.add(keep, forMode: "signal-b")
            defer { signalled.invalidate(); keep.invalidate() }

            signalled.signal()
            #expect(try pass(loop, "signal-b") == .timedOut)
            #expect(try pass(loop, "signal-b") == .timedOut)
            #expect(log.all == [])
            #expect(signalled.isSignalled)
            #expect(try loop.run(mode: "signal-a", until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(log.all == ["a"])
            #expect(!signalled.isSignalled)
            #expect(try pass(loop, "signal-a") == .timedOut)
            #expect(log.all == ["a"])
        }
    }

    @Test func aSourceInTwoModesRunsOncePerSignalInEither() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let both = source("both", log)
            try loop.add(both, forMode: "two-a")
            try loop.add(both, forMode: "two-b")
            defer { both.invalidate() }
            both.signal()
            _ = try pass(loop, "two-b")
            _ = try pass(loop, "two-a")
            #expect(log.all == ["both"])
            both.signal()
            _ = try pass(loop, "two-a")
            _ = try pass(loop, "two-b")
            #expect(log.all == ["both", "both"])
        }
    }

    @Test func signalledSourcesRunInTheirOrderThenAsAdded() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let x3 = source("x3", order: 3, log), a1 = source("a1", order: 1, log)
            let c2 = source("c2", order: 2, log), b1 = source("b1", order: 1, log)
            for added in [x3, a1, c2, b1] { try loop.add(added, forMode: "ordered") }
            defer { for added in [x3, a1, c2, b1] { added.invalidate() } }
            for signalled in [b1, c2, x3, a1] { signalled.signal() }
            _ = try pass(loop, "ordered")
            #expect(log.all == ["a1", "b1", "c2", "x3"])
        }
    }

    @Test func aSourceRemovedOrInvalidatedAfterItsSignalDoesNotRun() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let removed = source("removed", log), invalidated = source("invalidated", log)
            let later = source("later", order: 2, log)
            let first = LoopSource(order: 1, perform: { log.append("first"); loop.remove(later, forMode: "gone") })
            let keep = keepAlive()
            for added in [removed, invalidated, first, later, keep] { try loop.add(added, forMode: "gone") }
            defer { for added in [removed, invalidated, first, later, keep] { added.invalidate() } }

            for signalled in [removed, invalidated, later, first] { signalled.signal() }
            loop.remove(removed, forMode: "gone")
            invalidated.invalidate()
            _ = try pass(loop, "gone")
            // `first` removed `later` during the pass that was about to perform it.
            #expect(log.all == ["first"])
            // Added again while still signalled, it runs on the next pass.
            try loop.add(later, forMode: "gone")
            _ = try pass(loop, "gone")
            #expect(log.all == ["first", "later"])
        }
    }

    @Test func aSourceSignalledAgainWhileSignalledRunsOnce() throws {
        try withOwnLoop { loop in
            let performed = Counter()
            let again = Atomic<Bool>(true)
            let selfSignalling = Locked<LoopSource?>(nil)
            let coalesced = LoopSource(perform: {
                performed.increment()
                // A signal during its own perform is a new one: it runs on a later pass.
                if again.exchange(false, ordering: .relaxed) { selfSignalling.withLock { $0 }?.signal() }
            })
            selfSignalling.withLock { $0 = coalesced }
            try loop.add(coalesced, forMode: "twice")
            defer { coalesced.invalidate(); selfSignalling.withLock { $0 = nil } }
            for _ in 0..<3 { coalesced.signal() }
            _ = try pass(loop, "twice")
            #expect(performed.count == 1)
            _ = try pass(loop, "twice")
            #expect(performed.count == 2)
            _ = try pass(loop, "twice")
            #expect(performed.count == 2)
        }
    }

    @Test func aSourceSignalledBeforeItWasAddedRunsOnceAdded() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let early = source("early", log)
            early.signal()
            try loop.add(early, forMode: "early")
            defer { early.invalidate() }
            #expect(try loop.run(mode: "early", until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(log.all == ["early"])
        }
    }

    @Test func returnAfterSourceHandledPerformsOneSourcePerRun() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let one = source("one", order: 1, log), two = source("two", order: 2, log)
            try loop.add(two, forMode: "one-each")
            try loop.add(one, forMode: "one-each")
            defer { one.invalidate(); two.invalidate() }
            two.signal()
            one.signal()
            #expect(try loop.run(mode: "one-each", until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(log.all == ["one"])
            #expect(two.isSignalled)
            #expect(try loop.run(mode: "one-each", until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(log.all == ["one", "two"])
        }
    }

    @Test func aRunNestedInAPerformPerformsTheSourcesSignalledAfterIt() throws {
        try withOwnLoop { loop in
            let log = Recorder<String>()
            let inner = source("inner", order: 2, log)
            let outer = LoopSource(order: 1, perform: {
                log.append("outer begins")
                _ = try? loop.run(mode: "nested", until: .now - .seconds(1))
                log.append("outer ends")
            })
            try loop.add(outer, forMode: "nested")
            try loop.add(inner, forMode: "nested")
            defer { outer.invalidate(); inner.invalidate() }
            inner.signal()
            outer.signal()
            _ = try pass(loop, "nested")
            #expect(log.all == ["outer begins", "inner", "outer ends"])
        }
    }

    @Test func signallingFromAnotherThreadWakesASleepingLoopInTheSourcesMode() throws {
        let performed = Counter()
        let sleeps = Counter()
        let target = LoopSource(perform: { performed.increment() })
        let result = Locked<LoopRunResult?>(nil)
        let worker = LoopThread { loop in
            try! loop.add(target, forMode: .default)
            try! loop.add(LoopObserver(activities: .beforeWaiting) { _, _ in sleeps.increment() }, forMode: .default)
            let r = try! loop.run(mode: .default, until: .now + .seconds(120), returnAfterSourceHandled: true)
            result.withLock { $0 = r }
            target.invalidate()
        }
        #expect(eventually { sleeps.count >= 1 })
        target.signal()
        #expect(worker.join(timeout: .seconds(60)))
        #expect(result.withLock { $0 } == .handledSource)
        #expect(performed.count == 1)
    }

    /// The point of the signalled list: a pass looks at the sources that were signalled, not
    /// at the thousand others of its mode.
    @Test func aPassVisitsOnlyTheSignalledSources() throws {
        let visits = Locked<[Int]>([])
        let performed = Counter()
        let worker = LoopThread { loop in
            let quiet = (0..<1000).map { _ in LoopSource(perform: {}) }
            let busy = (0..<3).map { _ in LoopSource(perform: { performed.increment() }) }
            for source in quiet + busy { try! loop.add(source, forMode: .default) }
            let before = loop.signalledSourceVisits
            _ = try! loop.run(mode: .default, until: .now - .seconds(1))
            let idle = loop.signalledSourceVisits
            busy[0].signal()
            _ = try! loop.run(mode: .default, until: .now - .seconds(1))
            let one = loop.signalledSourceVisits
            for source in busy { source.signal() }
            _ = try! loop.run(mode: .default, until: .now - .seconds(1))
            visits.withLock { $0 = [before, idle, one, loop.signalledSourceVisits] }
            for source in quiet + busy { source.invalidate() }
        }
        #expect(worker.join(timeout: .seconds(60)))
        let counts = visits.withLock { $0 }
        try #require(counts.count == 4)
        #expect(counts[1] - counts[0] == 0)
        #expect(counts[2] - counts[1] == 1)
        #expect(counts[3] - counts[2] == 3)
        #expect(performed.count == 4)
    }
}
