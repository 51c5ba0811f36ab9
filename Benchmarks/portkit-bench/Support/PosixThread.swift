import Glibc
import Dispatch
import Synchronization
import CPortKitSystem

/// A pthread running one closure; whoever starts it joins it.
///
/// The benchmarks make their threads this way (not with Foundation's `Thread`) so that the
/// raw baseline and the PortKit loop run on the same kind of plain thread.
struct PosixThread: Sendable {
    private let handle: pthread_t

    /// What the new thread runs, passed to it through `pthread_create`'s argument.
    private final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts a thread named `name` (as the OS shows it) that runs `body`.
    /// - Throws: `BenchmarkError.system` when `pthread_create` fails.
    static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(BenchmarkError) -> PosixThread {
        let start = Unmanaged.passRetained(Start(name: name, body: body))
        var handle = pthread_t()
        let status = pthread_create(&handle, nil, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            _ = portkit_set_thread_name(start.name)
            start.body()
            return nil
        }, start.toOpaque())
        guard status == 0 else {
            start.release()
            throw .system(operation: "pthread_create", errno: status)
        }
        return PosixThread(handle: handle)
    }

    /// Waits for the thread to end.
    func join() {
        let status = pthread_join(handle, nil)
        precondition(status == 0, "pthread_join failed: \(status)")
    }
}

/// Hands one value from a starting thread to the thread that waits for it.
final class Handoff<Value: Sendable>: Sendable {
    private let slot = Mutex<Value?>(nil)
    private let filled = DispatchSemaphore(value: 0)

    /// Gives the value; call once.
    func put(_ value: Value) {
        slot.withLock { $0 = value }
        filled.signal()
    }

    /// Waits for the value for at most `timeout`.
    /// - Throws: `BenchmarkError.timedOut` naming `what` when no value came in time.
    func take(within timeout: Duration, what: String) throws(BenchmarkError) -> Value {
        let nanoseconds = Int(timeout.microseconds * 1000)
        guard filled.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .success else { throw .timedOut(what) }
        return slot.withLock { $0! }
    }
}
