import Foundation
import PermanentThread
import PortKitLocks

/// Runs `body` on a thread started for it, with that thread's loop, and returns what the body
/// returned (or throws what it threw) once the thread has finished.
///
/// A test that runs a loop must own the thread of that loop. The loop of one of Swift
/// Testing's pool threads outlives the test that made it: what a test leaves on it (a
/// source, a timer, an observer, a block waiting for its mode) is still there when the next
/// test lands on that thread, and can make it hang. The thread made here ends with the body,
/// and its loop with it (the loop's thread-exit clean-up), so each test starts on an empty
/// loop. `ThreadLoop.current` inside the body is `loop`: nested runs and modes of the
/// current loop are tested as they were. `#expect` and `#require` work on any thread.
///
/// Enforced by `TestsOwnTheirLoopsTests` (in PermanentThreadTests): a test target's source
/// may name `ThreadLoop.current` only on a line marked `// owned thread`, for code that runs
/// on a thread the test made (a `LoopThread`, a `PermanentThread`, a port's loop thread);
/// everything else takes its loop from `withOwnLoop`, `LoopThread` or `PermanentThread`.
///
/// - Parameters:
///   - name: The thread's name, as a stall report or a debugger shows it.
///   - timeout: How long to wait for the body; a body still running then fails the test
///     with `OwnLoopError.didNotReturn` rather than hanging the run.
///   - body: The test's code, given the thread's loop.
/// - Returns: What `body` returned.
/// - Throws: What `body` threw, or `OwnLoopError.didNotReturn`.
@discardableResult
package func withOwnLoop<Value: Sendable>(
    name: String = "test-own-loop", timeout: Duration = .seconds(300),
    _ body: @escaping @Sendable (ThreadLoop) throws -> Value
) throws -> Value {
    let outcome = Locked<Result<Value, any Error>?>(nil)
    let finished = TestLatch()
    let thread = Thread {
        let result = Result { try body(ThreadLoop.current) }  // owned thread
        outcome.withLock { $0 = result }
        finished.open()
    }
    thread.name = name
    thread.start()
    guard finished.wait(timeout: timeout) else { throw OwnLoopError.didNotReturn(within: timeout) }
    return try outcome.withLock { $0 }!.get()
}

/// Why `withOwnLoop` gave no result.
package enum OwnLoopError: Error, Equatable {
    /// The body was still running when the time-out passed.
    case didNotReturn(within: Duration)
}
