import Testing
import Glibc
import Synchronization
import CPortKitSystem
import PortKitTestSupport
@testable import PermanentThread

@Suite("PermanentThread: stop and deinit")
struct PermanentThreadStopTests {
    @Test func stopRunsEveryBlockQueuedBeforeItAndWaitsForTheExit() throws {
        let thread = PermanentThread(name: "stop-drain")
        try thread.run()
        let id = try #require(thread.threadID)
        let gate = TestLatch()
        let started = TestLatch()
        let ran = Shared<[Int]>([])
        let exited = TestLatch()
        try thread.execute {
            openWhenThisThreadExits(exited)
            started.open()
            _ = gate.wait()
            ran.update { $0.append(0) }
        }
        #expect(started.wait())
        for index in 1...500 { try thread.execute { ran.update { $0.append(index) } } }

        let stopper = PermanentThread(name: "stopper")
        try stopper.run()
        let stopReturned = TestLatch()
        try stopper.execute {
            thread.stop()
            stopReturned.open()
        }
        // Once stop() has queued its exit marker, new work is refused.
        #expect(eventually { thread.isStopRequested })
        #expect(throws: PermanentThreadError.stopped) { try thread.execute {} }
        // stop() is still waiting: the running block has not finished.
        #expect(!stopReturned.opened)
        #expect(ran.value.isEmpty)

        gate.open()
        #expect(stopReturned.wait())
        #expect(exited.opened, "stop() returned before the thread had exited")
        #expect(ran.value == Array(0...500))
        #expect(eventually { !taskExists(id) })
        stopper.stop()
    }

    @Test func stopFromABlockOnTheThreadReturnsAndTheThreadExits() throws {
        let thread = PermanentThread(name: "stop-inside")
        try thread.run()
        let id = try #require(thread.threadID)
        let gate = TestLatch()
        let events = Shared<[String]>([])
        try thread.execute {
            _ = gate.wait()
            events.update { $0.append("block begins") }
            thread.stop()  // cannot wait for itself: returns at once
            events.update { $0.append("stop returned") }
            do {
                try thread.execute { events.update { $0.append("executed after stop") } }
            } catch {
                events.update { $0.append("refused: \((error as? PermanentThreadError) == .stopped)") }
            }
            thread.stop()  // twice, on the thread
        }
        try thread.execute { events.update { $0.append("queued before stop") } }
        gate.open()
        thread.stop()  // from outside too: waits for the exit
        #expect(events.value == ["block begins", "stop returned", "refused: true", "queued before stop"])
        #expect(!thread.isCurrent)
        #expect(eventually { !taskExists(id) })
    }

    @Test func stopEndsTheThreadWhenItsMarkerRunsInANestedRun() throws {
        let thread = PermanentThread(name: "stop-nested")
        try thread.run()
        let id = try #require(thread.threadID)
        let nestedResult = Shared<LoopRunResult?>(nil)
        let inBlock = TestLatch()
        try thread.execute {
            inBlock.open()
            // A handler that runs the loop again, as a modal wait does; the exit marker
            // runs in here.
            let result = try? ThreadLoop.current.run(mode: .default, for: .seconds(120))  // owned thread
            nestedResult.update { $0 = result }
        }
        #expect(inBlock.wait())
        let stopper = PermanentThread(name: "nested-stopper")
        try stopper.run()
        let stopReturned = TestLatch()
        try stopper.execute {
            thread.stop()
            stopReturned.open()
        }
        #expect(stopReturned.wait(), "the outer run went on after the marker ended the nested one")
        #expect(nestedResult.value == .stopped)
        #expect(eventually { !taskExists(id) })
        stopper.stop()
    }

    @Test func stopFromATaskOnTheThreadDoesNotDeadlock() async throws {
        let thread = PermanentThread(name: "stop-task")
        try thread.run()
        let id = try #require(thread.threadID)
        let onThread = await Task(executorPreference: thread) {
            let here = thread.isCurrent
            thread.stop()
            return here
        }.value
        #expect(onThread)
        thread.stop()
        #expect(eventually { !taskExists(id) })
    }

    @Test func concurrentAndRepeatedStopsAllReturnAfterTheExit() throws {
        let thread = PermanentThread(name: "stop-many")
        try thread.run()
        let id = try #require(thread.threadID)
        let gate = TestLatch()
        try thread.execute { _ = gate.wait() }
        let stoppers = (0..<4).map { PermanentThread(name: "stopper-\($0)") }
        let returned = Atomic<Int>(0)
        for stopper in stoppers {
            try stopper.run()
            try stopper.execute {
                thread.stop()
                returned.add(1, ordering: .relaxed)
            }
        }
        #expect(eventually { thread.isStopRequested })
        #expect(returned.load(ordering: .relaxed) == 0)
        gate.open()
        for stopper in stoppers { try stopper.sync {} }
        #expect(returned.load(ordering: .relaxed) == 4)
        thread.stop()  // a fifth, later stop returns at once
        #expect(eventually { !taskExists(id) })
        for stopper in stoppers { stopper.stop() }
    }

    @Test func executeSyncAndSubmitAfterStopThrowStopped() async throws {
        let thread = PermanentThread(name: "after-stop")
        try thread.run()
        thread.stop()
        #expect(thread.isStopRequested)
        #expect(throws: PermanentThreadError.stopped) { try thread.execute {} }
        #expect(throws: ThreadCallError<Never>.thread(.stopped)) { try thread.sync { 1 } }
        await #expect(throws: ThreadCallError<Never>.thread(.stopped)) { try await thread.submit { 1 } }
        #expect(throws: PermanentThreadError.stopped) { try thread.run() }
        #expect(thread.loop != nil)  // still reachable, refusing work
    }

    @Test func stopBeforeRunRunsTheBlocksAlreadyAccepted() throws {
        let thread = PermanentThread(name: "never-run")
        let ran = Shared<[Int]>([])
        for index in 0..<3 { try thread.execute { ran.update { $0.append(index) } } }
        thread.stop()
        #expect(ran.value == [0, 1, 2])
        #expect(throws: PermanentThreadError.stopped) { try thread.execute {} }

        let empty = PermanentThread(name: "never-run-2")
        empty.stop()
        #expect(empty.threadID == nil)  // nothing to run: no thread was made
        #expect(throws: PermanentThreadError.stopped) { try empty.run() }
    }

    /// The seeds' pitfall: a thread whose run loop keeps its owner (and so itself) alive.
    /// Here the loop holds a repeating timer, an observer and a source; the owner's last
    /// reference going away must still end the thread.
    final class Owner: Sendable {
        let thread = PermanentThread(name: "owned")
        let ticks = Atomic<Int>(0)

        init() throws {
            try thread.run()
            let loop = try #require(thread.loop)
            try loop.add(LoopTimer(after: .milliseconds(1), repeating: .milliseconds(1)) { [weak self] _ in
                self?.ticks.add(1, ordering: .relaxed)
            }, forMode: .common)
            try loop.add(LoopObserver(activities: .all) { _, _ in }, forMode: .common)
            try loop.add(LoopSource {}, forMode: .common)
        }
    }

    @Test func droppingTheLastReferenceStopsAndJoinsTheThread() throws {
        var owner: Owner? = try Owner()
        let id = try #require(owner?.thread.threadID)
        weak let weakThread = owner?.thread
        weak let weakLoop = owner?.thread.loop
        let ran = Shared(0)
        let exited = TestLatch()
        try owner?.thread.execute { openWhenThisThreadExits(exited) }
        for _ in 0..<100 { try owner?.thread.execute { ran.update { $0 += 1 } } }
        #expect(taskExists(id))

        owner = nil  // deinit stops the thread and joins it
        #expect(exited.opened, "the thread had not exited when the owner's release returned")
        #expect(ran.value == 100)
        #expect(weakThread == nil)
        #expect(weakLoop == nil)  // the loop went with its thread: nothing leaked
        #expect(eventually { !taskExists(id) })
    }

    @Test func releasingTheLastReferenceOnTheThreadItselfDoesNotDeadlock() throws {
        var thread: PermanentThread? = PermanentThread(name: "self-release")
        try thread?.run()
        let id = try #require(thread?.threadID)
        weak let weakThread = thread
        let gate = TestLatch()
        let exited = TestLatch()
        // The block holds a reference; once the test drops its own, the block's is the
        // last, released on the thread itself after the block ran.
        try thread?.execute { [thread] in
            openWhenThisThreadExits(exited)
            _ = gate.wait()
            _ = thread
        }
        thread = nil
        gate.open()
        #expect(exited.wait(), "the thread released on itself never exited")
        #expect(weakThread == nil)
        #expect(eventually { !taskExists(id) })
    }
}
