import Testing
import Glibc
import PortKitSystem
import PortKitTestSupport
@testable import PermanentThread

/// A loop whose poller's wait fails (a kernel refusal, made here with the fault seam) ends
/// with a typed error, never a crash or a loop that spins on a wait that fails at once.
@Suite("ThreadLoop: a poller that fails")
struct LoopFailureTests {
    /// The system call this process's loops wait in, as the fault seam names it.
    private var waitCall: SystemCall { PlatformPoller.usesPoll ? .poll : .epollWait }

    /// The failure a loop reports for a wait refused with `EBADF`.
    private static let refusedWait = ThreadLoopError.system(SystemCallError(operation: "poller wait", errno: EBADF))

    @Test func aRunWhoseWaitFailsThrowsAndEveryLaterRunThrowsTheSame() throws {
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let outcome = try withOwnLoop { loop -> [String] in
            // A watched descriptor makes the loop wait in the poller, not on its futex.
            let source = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in }
            try loop.add(source, forMode: .default)
            var seen: [String] = []
            let (_, fired) = FaultSeam.injecting(.failure(.badFileDescriptor), on: waitCall) {
                do throws(ThreadLoopError) {
                    _ = try loop.run(mode: .default, for: .seconds(30))
                    seen.append("returned")
                } catch {
                    seen.append(error == Self.refusedWait ? "failed" : "other: \(error)")
                }
            }
            seen.append("fired \(fired)")
            // The fault is gone, but the loop stays failed: no second wait is made.
            do throws(ThreadLoopError) {
                _ = try loop.run(mode: .default, for: .seconds(30))
                seen.append("returned")
            } catch {
                seen.append(error == Self.refusedWait ? "failed again" : "other: \(error)")
            }
            do throws(ThreadLoopError) {
                try loop.perform {}
                seen.append("accepted")
            } catch {
                seen.append(error == .loopEnded ? "refused" : "other: \(error)")
            }
            return seen
        }
        #expect(outcome == ["failed", "fired 1", "failed again", "refused"])
    }

    @Test func aPermanentThreadWhoseLoopFailsStopsAndRefusesWorkWithTheFailure() async throws {
        let thread = PermanentThread(name: "loop-failure")
        try thread.run()
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let loop = try #require(thread.loop)
        let source = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in }
        try loop.add(source, forMode: .common)
        let scope = try thread.sync { FaultSeam.currentThread }
        let rule = FaultSeam.arm(.failure(.badFileDescriptor), on: waitCall, scope: scope)
        defer { _ = FaultSeam.disarm(rule) }
        // Wakes the thread: the block runs, and the wait after it fails.
        let ran = TestLatch()
        try thread.execute { ran.open() }
        #expect(ran.wait())
        #expect(eventually { thread.isStopRequested })

        let refusal = PermanentThreadError.loop(Self.refusedWait)
        #expect(throws: refusal) { try thread.execute {} }
        #expect(throws: ThreadCallError<Never>.thread(refusal)) { try thread.sync { () -> Void in } }
        await #expect(throws: ThreadCallError<Never>.thread(refusal)) { try await thread.submit { () -> Void in } }
        // `stop()` joins the thread that ended on its own.
        thread.stop()
        #expect(thread.isStopRequested)
    }
}
