import CPortKitSystem
import PermanentThread

/// A thread running its `ThreadLoop` in the default mode until shut down: the PortKit side
/// of the loop benchmarks.
///
/// The thread takes `ThreadLoop.current`, adds a keep-alive custom source that is never
/// signalled (so that the run does not finish for want of sources), publishes the loop,
/// and runs it.
final class PortKitLoopThread: Sendable {
    /// The thread's loop.
    let loop: ThreadLoop
    /// The kernel id of the loop's thread.
    let threadID: CInt
    private let thread: PosixThread

    /// Starts the thread and waits until its loop is published.
    /// - Throws: `BenchmarkError` when the thread cannot start or its loop cannot be set up.
    init(name: String) throws {
        let handoff = Handoff<Result<(ThreadLoop, CInt), ThreadLoopError>>()
        thread = try PosixThread.start(name: name) {
            let loop = ThreadLoop.current
            do throws(ThreadLoopError) {
                try loop.add(LoopSource(perform: {}), forMode: .default)
            } catch {
                handoff.put(.failure(error))
                return
            }
            handoff.put(.success((loop, portkit_gettid())))
            do {
                try loop.run()
            } catch {
                fatalError("\(name): ThreadLoop.run failed on its own thread: \(error)")
            }
        }
        (loop, threadID) = try handoff.take(within: .seconds(10), what: "\(name) to publish its loop").get()
    }

    /// Schedules `block` on the loop (`ThreadLoop.perform` in the common modes).
    func post(_ block: @escaping @Sendable () -> Void) throws {
        try loop.perform(block)
    }

    /// Stops the loop and joins the thread.
    func shutDown() {
        loop.stop()
        thread.join()
    }
}
