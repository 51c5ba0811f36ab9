import Dispatch
import Foundation
import Synchronization
@testable import PermanentThread

/// A thread made for a test, running `body` with its own loop.
final class LoopThread: Sendable {
    let loop: ThreadLoop
    private let finished = DispatchSemaphore(value: 0)

    /// Starts a thread, makes its loop, hands the loop back, then runs `body` on the thread.
    init(name: String = "test-loop", _ body: @escaping @Sendable (ThreadLoop) -> Void) {
        let ready = DispatchSemaphore(value: 0)
        let box = Locked<ThreadLoop?>(nil)
        let finished = self.finished
        let thread = Thread {
            let loop = ThreadLoop.current
            box.withLock { $0 = loop }
            ready.signal()
            body(loop)
            finished.signal()
        }
        thread.name = name
        thread.start()
        ready.wait()
        loop = box.withLock { $0! }
    }

    /// Waits for `body` to return; false if it did not within `timeout`.
    func join(timeout: Duration = .seconds(20)) -> Bool {
        finished.wait(timeout: .now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)) == .success
    }
}

/// Waits until `condition` holds, checking every millisecond, for at most `timeout`.
/// Returns whether it held. Generous by default: the machine is small and shared.
func eventually(timeout: Duration = .seconds(20), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    let pause = DispatchSemaphore(value: 0)
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        _ = pause.wait(timeout: .now() + .milliseconds(1))
    }
    return true
}

/// A thread-safe list for recording what happened, in order.
final class Recorder<Element: Sendable>: Sendable {
    private let items = Locked<[Element]>([])
    func append(_ element: Element) { items.withLock { $0.append(element) } }
    var all: [Element] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
}

/// A keep-alive source: a mode holding it is never empty.
func keepAlive() -> LoopSource { LoopSource(perform: {}) }

/// A thread-safe counter.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}
