import CPortKitSystem
import Dispatch
import Glibc
import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread
import PortKitLocks

/// `sync` through a reusable per-caller slot: the same semantics as a call object per call.
@Suite("PermanentThread: sync")
struct PermanentThreadSyncTests {
    @Test func aCallersSyncCallsShareOneSlot() throws {
        let thread = PermanentThread(name: "sync-slot")
        try thread.run()
        defer { thread.stop() }
        let results = Locked<(calls: Int, sums: [Int])>((0, []))
        let caller = LoopThread(name: "sync-slot-caller") { _ in
            let before = SyncSlot.forCurrentThread().calls
            var sums: [Int] = []
            for value in 0..<1000 { sums.append((try? thread.sync { value * 2 }) ?? -1) }
            results.withLock { $0 = (SyncSlot.forCurrentThread().calls - before, sums) }
        }
        #expect(caller.join(timeout: .seconds(60)))
        let (calls, sums) = results.withLock { $0 }
        #expect(calls == 1000)
        #expect(sums == (0..<1000).map { $0 * 2 })
    }

    @Test func concurrentCallersEachGetTheirOwnResults() throws {
        let thread = PermanentThread(name: "sync-many")
        try thread.run()
        defer { thread.stop() }
        let callers = 4, perCaller = 2000
        let wrong = Atomic<Int>(0)
        let ranOnThread = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: callers) { caller in
            for index in 0..<perCaller {
                let expected = caller * 1_000_000 + index
                let (value, onThread) = (try? thread.sync { (expected, thread.isCurrent) }) ?? (-1, false)
                if value != expected { wrong.add(1, ordering: .relaxed) }
                if onThread { ranOnThread.add(1, ordering: .relaxed) }
            }
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
        #expect(ranOnThread.load(ordering: .relaxed) == callers * perCaller)
    }

    @Test func aCallLongerThanTheSpinSleepsAndIsWoken() throws {
        let thread = PermanentThread(name: "sync-sleeper")
        try thread.run()
        defer { thread.stop() }
        // Far longer than any spin: the caller must sleep on its word and be woken.
        let value = try thread.sync { () -> Int in
            usleep(50_000)
            return 7
        }
        #expect(value == 7)
        #expect(throws: ThreadCallError.body(Boom(code: 9))) {
            try thread.sync { () throws(Boom) -> Int in usleep(50_000); throw Boom(code: 9) }
        }
        #expect(try thread.sync { 8 } == 8)
    }

    @Test func nestedSyncFromAWorkerToOtherWorkers() throws {
        let first = PermanentThread(name: "sync-first")
        let second = PermanentThread(name: "sync-second")
        let third = PermanentThread(name: "sync-third")
        for worker in [first, second, third] { try worker.run() }
        defer { for worker in [first, second, third] { worker.stop() } }
        let path = try first.sync { () throws -> [Int32] in
            let inner = try second.sync { () throws -> [Int32] in
                [portkit_gettid(), try third.sync { portkit_gettid() }]
            }
            return [portkit_gettid()] + inner
        }
        #expect(path == [first.threadID, second.threadID, third.threadID].map { $0! })
    }

    @Test func syncRacingStopRunsOrIsRefusedAndNeverHangs() throws {
        for round in 0..<20 {
            let thread = PermanentThread(name: "sync-stop-\(round)")
            try thread.run()
            let ran = Atomic<Int>(0), refused = Atomic<Int>(0), other = Atomic<Int>(0)
            let callers = (0..<3).map { index in
                LoopThread(name: "sync-stop-caller-\(index)") { _ in
                    for _ in 0..<200 {
                        do {
                            try thread.sync { _ = ran.add(1, ordering: .relaxed) }
                        } catch ThreadCallError<Never>.thread(.stopped) {
                            refused.add(1, ordering: .relaxed)
                        } catch {
                            other.add(1, ordering: .relaxed)
                        }
                    }
                }
            }
            thread.stop()
            for caller in callers { #expect(caller.join(timeout: .seconds(60))) }
            #expect(ran.load(ordering: .relaxed) + refused.load(ordering: .relaxed) == 600)
            #expect(other.load(ordering: .relaxed) == 0)
        }
    }
}
