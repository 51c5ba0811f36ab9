import CPortKitSystem
import Glibc
import PermanentThread

/// A thread running its `ThreadLoop` until stopped: where the name server and the client
/// connections live. (Stands in for `PermanentThread` until that lands on main.)
final class LoopThread: Sendable {
    /// The thread's loop.
    let loop: ThreadLoop
    private let handle: Locked<pthread_t?>

    private final class Start: Sendable {
        let name: String
        let ready: ConditionLock<ThreadLoop?>
        init(name: String) {
            self.name = name
            ready = ConditionLock(nil)
        }
    }

    /// Starts a thread named `name` and waits until its loop runs.
    init(name: String) throws(NameServerError) {
        let start = Start(name: name)
        let retained = Unmanaged.passRetained(start)
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            _ = portkit_set_thread_name(start.name)
            let loop = ThreadLoop.current
            // Keeps the run going while no other source is there.
            try? loop.add(LoopSource(perform: {}), forMode: .default)
            start.ready.withLock { $0 = loop }
            start.ready.broadcast()
            try? loop.run()
            return nil
        }, retained.toOpaque())
        guard status == 0 else {
            retained.release()
            throw .system(operation: "pthread_create", errno: status)
        }
        loop = start.ready.wait(until: nil) { $0 }!
        handle = Locked(thread)
    }

    /// Runs `block` on the thread.
    func execute(_ block: @escaping @Sendable () -> Void) throws(NameServerError) {
        do {
            try loop.perform(inModes: [.common], block)
        } catch {
            throw .connectionLost(address: "(the \(loop.name) thread has ended)")
        }
    }

    /// Whether the calling thread is this thread.
    var isCurrent: Bool { loop.isCurrent }

    /// Runs the blocks already queued, ends the thread and waits for it (returns at once
    /// when called on the thread itself, which then ends after the current block).
    func stop() {
        let loop = self.loop
        try? loop.perform(inModes: [.common]) { loop.stop() }
        guard !loop.isCurrent, let thread = handle.withLock({ value -> pthread_t? in defer { value = nil }; return value }) else {
            return
        }
        pthread_join(thread, nil)
    }
}
