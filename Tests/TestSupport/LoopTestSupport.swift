import Dispatch
import Foundation
import Synchronization
import PermanentThread
import PortKitLocks

/// A thread made for a test, running `body` with its own loop.
package final class LoopThread: Sendable {
    package let loop: ThreadLoop
    private let finished = DispatchSemaphore(value: 0)

    /// Starts a thread, makes its loop, hands the loop back, then runs `body` on the thread.
    package init(name: String = "test-loop", _ body: @escaping @Sendable (ThreadLoop) -> Void) {
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

    /// A thread whose loop runs its default mode, kept alive by a never-signalled source,
    /// until stopped (or `limit` passes): the usual target of cross-thread tests.
    package static func runningDefaultMode(name: String = "test-loop", limit: Duration = .seconds(120)) -> LoopThread {
        LoopThread(name: name) { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            _ = try! loop.run(mode: .default, until: .now + limit)
            keep.invalidate()
        }
    }

    /// Waits for `body` to return; false if it did not within `timeout`.
    package func join(timeout: Duration = .seconds(20)) -> Bool {
        finished.wait(timeout: .now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)) == .success
    }
}

/// Waits until `condition` holds, checking every millisecond, for at most `timeout`.
/// Returns whether it held. Generous by default: the machine is small and shared.
package func eventually(timeout: Duration = .seconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    let pause = DispatchSemaphore(value: 0)
    while try !condition() {
        if ContinuousClock.now > deadline { return false }
        _ = pause.wait(timeout: .now() + .milliseconds(1))
    }
    return true
}

/// A thread-safe list for recording what happened, in order.
package final class Recorder<Element: Sendable>: Sendable {
    package init() {}
    private let items = Locked<[Element]>([])
    package func append(_ element: Element) { items.withLock { $0.append(element) } }
    package var all: [Element] { items.withLock { $0 } }
    package var count: Int { items.withLock { $0.count } }
}

/// A keep-alive source: a mode holding it is never empty.
package func keepAlive() -> LoopSource { LoopSource(perform: {}) }

/// A thread-safe counter.
package final class Counter: Sendable {
    package init() {}
    private let value = Atomic<Int>(0)
    package func increment() { value.add(1, ordering: .relaxed) }
    package var count: Int { value.load(ordering: .relaxed) }
}

/// A one-shot event a test waits for, with a deadline.
package final class TestLatch: Sendable {
    package init() {}
    private let isOpen = ConditionLock(false)

    /// Opens the latch: every waiter, and every later one, goes on.
    package func open() {
        isOpen.withLock { $0 = true }
        isOpen.broadcast()
    }

    /// Whether it is open.
    package var opened: Bool { isOpen.withLock { $0 } }

    /// Whether it opened within `timeout`.
    package func wait(timeout: Duration = .seconds(60)) -> Bool {
        isOpen.wait(until: .now + timeout) { $0 ? () : nil } != nil
    }
}
