import CPortKitSystem
import Glibc
import Testing
import PortKitTestSupport

import PortKitLocks

/// `DoneWord`: what a `sync` caller and an in-process requester sleep on. Its time limit is
/// a deadline on the monotonic clock, kept across early wake-ups.
@Suite("PermanentThread: done word")
struct DoneWordTests {
    @Test func aWordMarkedBeforeTheWaitIsDoneAtOnce() {
        let word = DoneWord(done: false)
        defer { word.deallocate() }
        word.markDone()
        #expect(word.wait(timeout: .zero))
        #expect(word.wait(timeout: nil))
    }

    @Test func aZeroOrNegativeLimitTellsTheStateWithoutWaiting() {
        let word = DoneWord(done: false)
        defer { word.deallocate() }
        #expect(!word.wait(timeout: .zero))
        #expect(!word.wait(timeout: .seconds(-5)))
        word.markDone()
        #expect(word.wait(timeout: .seconds(-5)))
    }

    @Test func anUnmarkedWordTimesOutNoSoonerThanItsLimit() {
        let word = DoneWord(done: false)
        defer { word.deallocate() }
        let limit = Duration.milliseconds(50)
        let start = ContinuousClock.now
        #expect(!word.wait(timeout: limit))
        #expect(ContinuousClock.now - start >= limit)
        #expect(!word.isDone)
    }

    @Test func aSleepingWaiterIsWokenByTheMark() {
        let word = DoneWord(done: false)
        defer { word.deallocate() }
        let waiterID = Locked<pid_t?>(nil)
        let waited = Locked<Bool?>(nil)
        let waiter = LoopThread(name: "done-word-waiter") { _ in
            waiterID.withLock { $0 = portkit_gettid() }
            // A limit far past the test's: only the mark ends this wait.
            let done = word.wait(timeout: .seconds(600))
            waited.withLock { $0 = done }
        }
        // Marked once the waiter sleeps, so the mark must wake it.
        #expect(eventually { waiterID.withLock { $0 }.map { schedulerState(ofThread: $0) == "S" } ?? false })
        #expect(waited.withLock { $0 } == nil)
        word.markDone()
        #expect(waiter.join(timeout: .seconds(60)))
        #expect(waited.withLock { $0 } == true)
    }

    @Test func aResetWordWaitsAgain() {
        let word = DoneWord(done: true)
        defer { word.deallocate() }
        #expect(word.wait(timeout: .zero))
        word.reset()
        #expect(!word.wait(timeout: .milliseconds(1)))
        word.markDone()
        #expect(word.wait(timeout: nil))
    }
}
