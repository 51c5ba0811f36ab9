import Testing
import Glibc
import Synchronization
import CPortKitSystem
import PortKitTestSupport
@testable import PermanentThread

/// An actor whose every method runs on a permanent thread.
actor Pinned {
    let thread: PermanentThread
    private(set) var count = 0

    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    init(on thread: PermanentThread) { self.thread = thread }

    /// Returns the kernel id of the thread it ran on.
    func increment() -> Int32 {
        count += 1
        return portkit_gettid()
    }

    func hop(to other: Pinned) async -> [Int32] {
        let here = portkit_gettid()
        let there = await other.increment()
        return [here, there, portkit_gettid()]
    }
}

nonisolated func currentThreadID() async -> Int32 { portkit_gettid() }

extension Pinned {
    /// The count, read by `assumeIsolated` from a nonisolated context on the thread.
    nonisolated func assumeIsolatedCount() -> Int32 {
        Int32(assumeIsolated { $0.count })
    }
}

@Suite("PermanentThread: executors")
struct PermanentThreadExecutorTests {
    @Test func anActorPinnedToAThreadRunsEveryMethodOnIt() async throws {
        let thread = PermanentThread(name: "actor-home")
        try thread.run()
        let id = try #require(thread.threadID)
        let actor = Pinned(on: thread)
        let ids = await withTaskGroup(of: Int32.self) { group in
            for _ in 0..<200 { group.addTask { await actor.increment() } }
            return await group.reduce(into: [Int32]()) { $0.append($1) }
        }
        #expect(ids.count == 200)
        #expect(ids.allSatisfy { $0 == id })
        #expect(await actor.count == 200)

        // Two actors on the same thread call each other without leaving it.
        let other = Pinned(on: thread)
        #expect(await actor.hop(to: other) == [id, id, id])
        thread.stop()
    }

    @Test func assumeIsolatedWorksFromABlockOnTheThread() async throws {
        let thread = PermanentThread(name: "assume")
        try thread.run()
        let actor = Pinned(on: thread)
        _ = await actor.increment()
        // A plain block is not a job of the actor: the runtime asks the executor
        // (isIsolatingCurrentContext / checkIsolated), which knows it is on its thread.
        let count = try thread.sync { actor.assumeIsolated { $0.count } }
        #expect(count == 1)
        #expect(thread.isIsolatingCurrentContext() == false)
        #expect(try thread.sync { thread.isIsolatingCurrentContext() } == true)
        thread.stop()
    }

    @Test func checkIsolatedTrapsOffTheThread() async {
        await #expect(processExitsWith: .failure) {
            let thread = PermanentThread(name: "check")
            try? thread.run()
            thread.checkIsolated()
        }
    }

    @Test func aTaskPreferringTheThreadRunsOnIt() async throws {
        let thread = PermanentThread(name: "task-home")
        try thread.run()
        let id = try #require(thread.threadID)
        let ranOn = await Task(executorPreference: thread) { portkit_gettid() }.value
        #expect(ranOn == id)
        // Nonisolated async functions follow the preference, across suspensions.
        let ids = await withTaskExecutorPreference(thread) {
            var seen: [Int32] = []
            for _ in 0..<20 {
                seen.append(await currentThreadID())
                await Task.yield()
            }
            return seen
        }
        #expect(ids.allSatisfy { $0 == id })
        thread.stop()
    }

    @Test func aTaskPreferringTheThreadGoesFromAwaitToAwaitWithoutALoopPass() async throws {
        // The task's jobs run with no actor isolation, so entering a nonisolated async
        // function is no change of executor: fifty awaits that do not suspend take no loop
        // pass. (Run isolated to the thread, each entry and each return was a switch, a job
        // queued on the loop: more than a hundred passes.)
        let thread = PermanentThread(name: "task-passes")
        try thread.run()
        let loop = try #require(thread.loop)
        let passes = Counter()
        try loop.add(LoopObserver(activities: .beforeSources) { _, _ in passes.increment() }, forMode: .common)
        let counted = await Task(executorPreference: thread) {
            let before = passes.count
            for _ in 0..<50 { _ = await currentThreadID() }
            return passes.count - before
        }.value
        #expect(counted == 0)

        // An actor on the thread, called from such a task, still runs isolated to itself,
        // and the task is back on the thread after the call.
        let actor = Pinned(on: thread)
        let id = try #require(thread.threadID)
        let ids = await Task(executorPreference: thread) {
            [await actor.increment(), portkit_gettid(), actor.assumeIsolatedCount()]
        }.value
        #expect(ids == [id, id, 1])
        thread.stop()
    }

    @Test func aTaskPreferringTheThreadHoldsItOnlyWhileItRuns() async throws {
        // A task made with an executor preference retains the executor it is given and, when
        // it ends, releases the one that executor's `asUnownedTaskExecutor()` names: they
        // must be the same object, or the thread leaks (and that other object is over-released).
        weak var released: PermanentThread?
        do {
            let thread = PermanentThread(name: "task-holder")
            try thread.run()
            released = thread
            let id = try #require(thread.threadID)
            for _ in 0..<10 {
                #expect(await Task(executorPreference: thread) { portkit_gettid() }.value == id)
            }
        }
        #expect(released == nil)
    }

    @Test func jobsAfterStopStillRunSeriallyInsteadOfHanging() async throws {
        let thread = PermanentThread(name: "stopped-home")
        try thread.run()
        let actor = Pinned(on: thread)
        _ = await actor.increment()
        thread.stop()
        // The loop is closed: the jobs are handed over and run on the callers' threads,
        // one at a time; nothing hangs, nothing is lost.
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<100 { group.addTask { _ = await actor.increment() } }
        }
        #expect(await actor.count == 101)
    }
}
