import CoreFoundation
import CPortKitSystem
import Dispatch
import Foundation
import Glibc
import Synchronization

/// A Foundation `Thread` running its `RunLoop` until shut down: the Foundation baseline of
/// the execute and idle benchmarks, made to work on Linux the only way it can:
///
/// - kept alive by a repeating timer far in the future (a `Port()` would trap);
/// - given blocks with `RunLoop.perform`, followed by `CFRunLoopWakeUp`, since `perform`
///   alone does not wake a sleeping loop;
/// - stopped with `CFRunLoopStop`, since `RunLoop` has no public stop.
///
/// CoreFoundation is imported here, in the benchmark, never in the library.
final class FoundationLoopThread: Sendable {
    /// The kernel id of the loop's thread.
    let threadID: CInt
    private let loop: LoopHandle
    private let control: Control

    /// What the caller and the thread share to end the thread.
    private final class Control: Sendable {
        let stopping = Atomic<Bool>(false)
        let exited = DispatchSemaphore(value: 0)
    }

    /// Starts the thread and waits until its run loop is set up.
    /// - Throws: `BenchmarkError.timedOut` when the thread does not publish its loop.
    init(name: String) throws(BenchmarkError) {
        let control = Control()
        let started = Handoff<LoopHandle>()
        let thread = Thread {
            _ = portkit_set_thread_name(name)
            let runLoop = RunLoop.current
            let keepAlive = Timer(fire: .distantFuture, interval: 1e9, repeats: true) { _ in }
            runLoop.add(keepAlive, forMode: .default)
            started.put(LoopHandle(runLoop: runLoop, cfRunLoop: CFRunLoopGetCurrent(), threadID: portkit_gettid()))
            // `run(mode:before:)` also returns after a `CFRunLoopStop` meant for nobody in
            // particular; only the flag ends the thread.
            while !control.stopping.load(ordering: .acquiring) {
                _ = runLoop.run(mode: .default, before: .distantFuture)
            }
            keepAlive.invalidate()
            control.exited.signal()
        }
        thread.start()
        loop = try started.take(within: .seconds(10), what: "\(name) to publish its run loop")
        threadID = loop.threadID
        self.control = control
    }

    /// Schedules `block` on the run loop and wakes it.
    func post(_ block: @escaping @Sendable () -> Void) {
        loop.runLoop.perform(block)
        CFRunLoopWakeUp(loop.cfRunLoop)
    }

    /// Ends the run loop after the blocks already posted and waits until the thread is gone.
    func shutDown() {
        control.stopping.store(true, ordering: .releasing)
        CFRunLoopStop(loop.cfRunLoop)
        control.exited.wait()
        // `Thread` has no join: wait until the kernel no longer lists the thread, so that
        // what it held (its stack, its loop's descriptors) is given back before the next run.
        let task = "/proc/self/task/\(threadID)"
        while access(task, F_OK) == 0 { usleep(100) }
    }
}

/// The run loop of a `FoundationLoopThread`, as other threads reach it.
// Safety of @unchecked Sendable: other threads call only `RunLoop.perform` (which is
// `CFRunLoopPerformBlock`, guarded by the run loop's own lock), `CFRunLoopWakeUp` and
// `CFRunLoopStop`, CoreFoundation's thread-safe entry points; running the loop and adding
// timers happen on its own thread only. `RunLoop` and `CFRunLoop` are not marked Sendable.
private final class LoopHandle: @unchecked Sendable {
    let runLoop: RunLoop
    let cfRunLoop: CFRunLoop
    let threadID: CInt

    init(runLoop: RunLoop, cfRunLoop: CFRunLoop, threadID: CInt) {
        self.runLoop = runLoop
        self.cfRunLoop = cfRunLoop
        self.threadID = threadID
    }
}
