import Testing
import PortKitTestSupport
@testable import PermanentThread

/// Waits, without holding a thread of the cooperative pool, until `condition` holds or
/// `timeout` passes; says whether it held.
private func eventuallyAsync(timeout: Duration = .seconds(30), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

/// The tasks that submit run on a permanent thread of their own (a task executor), not on
/// the cooperative pool: on a small machine the pool's threads can all be held by other
/// tests for a minute, and a test of what happens while a block waits must not depend on
/// when the pool gets to it.
@Suite("PermanentThread: submit and cancellation")
struct PermanentThreadSubmitTests {
    /// A task run on its own permanent thread.
    private func task<T: Sendable>(
        _ body: @escaping @Sendable () async throws -> T
    ) throws -> (Task<T, any Error>, PermanentThread) {
        let runner = PermanentThread(name: "submit-runner")
        try runner.run()
        return (Task(executorPreference: runner) { try await body() }, runner)
    }

    /// A thread kept busy by a block that waits for `release`; returns once it runs.
    private func busyThread(_ name: String, until release: TestLatch) async throws -> PermanentThread {
        let thread = PermanentThread(name: name)
        try thread.run()
        let busy = TestLatch()
        try thread.execute {
            busy.open()
            _ = release.wait(timeout: .seconds(600))
        }
        #expect(await eventuallyAsync { busy.opened })
        return thread
    }

    /// Once everything queued on `thread` has run: the cancelled submit's block never ran
    /// (`ran` is still 0) and the submit threw `.cancelledBeforeStart`.
    private func expectNeverRan(
        _ result: Result<Int, any Error>, _ ran: Counter, on thread: PermanentThread
    ) async throws {
        try await thread.submit {}
        #expect(ran.count == 0)
        #expect(throws: ThreadCallError<Never>.thread(.cancelledBeforeStart)) { try result.get() }
    }

    @Test func aSubmitCancelledWhileQueuedNeverRunsItsBlockAndThrowsCancellation() async throws {
        let release = TestLatch()
        let thread = try await busyThread("submit-queued", until: release)
        defer { thread.stop() }
        let ran = Counter()
        let (task, runner) = try task { try await thread.submit { ran.increment(); return 7 } }
        defer { runner.stop() }
        // The submitted block waits in the loop's inbox behind the busy one.
        #expect(await eventuallyAsync(timeout: .seconds(300)) { thread.loop?.inboxIsEmpty == false })
        task.cancel()
        let result = await task.result
        release.open()
        try await expectNeverRan(result, ran, on: thread)
    }

    @Test func aSubmitCancelledBeforeItIsMadeNeverRunsItsBlock() async throws {
        let thread = PermanentThread(name: "submit-early")
        try thread.run()
        defer { thread.stop() }
        let ran = Counter()
        let cancelled = TestLatch()
        let (task, runner) = try task {
            _ = await eventuallyAsync(timeout: .seconds(300)) { Task.isCancelled }
            cancelled.open()
            return try await thread.submit { ran.increment(); return 7 }
        }
        defer { runner.stop() }
        task.cancel()
        let result = await task.result
        #expect(cancelled.opened)
        try await expectNeverRan(result, ran, on: thread)
    }

    @Test func aSubmitCancelledWhileItsBlockRunsReturnsTheBlocksResult() async throws {
        let thread = PermanentThread(name: "submit-running")
        try thread.run()
        defer { thread.stop() }
        let started = TestLatch()
        let release = TestLatch()
        let ran = Counter()
        let (task, runner) = try task {
            try await thread.submit { () -> Int in
                started.open()
                _ = release.wait(timeout: .seconds(600))
                ran.increment()
                return 7
            }
        }
        defer { runner.stop() }
        #expect(await eventuallyAsync(timeout: .seconds(300)) { started.opened })
        task.cancel()
        release.open()
        let result = await task.result
        #expect(ran.count == 1)
        #expect(try result.get() == 7)
    }
}
