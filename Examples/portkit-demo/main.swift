// portkit-demo: PortKit end to end, readable output, exit 0.
import Foundation
import PermanentThread
import Synchronization

print("PortKit demo")
print("1. A thread with its own run loop: a repeating timer, an observer, a block from another thread.")

let started = DispatchSemaphore(value: 0)
let finished = DispatchSemaphore(value: 0)
let loopBox = Mutex<ThreadLoop?>(nil)

let worker = Thread {
    let loop = ThreadLoop.current
    let ticks = Atomic<Int>(0)
    let observer = LoopObserver(activities: [.entry, .beforeWaiting, .afterWaiting, .exit]) { _, activity in
        print("   observer: \(activity)")
    }
    try! loop.add(observer, forMode: .default)
    let timer = LoopTimer(after: .milliseconds(20), repeating: .milliseconds(20)) { timer in
        let n = ticks.add(1, ordering: .relaxed).newValue
        print("   timer tick \(n)")
        if n == 3 { timer.invalidate() }
    }
    try! loop.add(timer, forMode: .default)
    loopBox.withLock { $0 = loop }
    started.signal()
    let result = try! loop.run(mode: .default, until: .now + .seconds(10))
    print("   run returned \(result)")
    observer.invalidate()
    finished.signal()
}
worker.start()
started.wait()
let loop = loopBox.withLock { $0! }
try loop.perform(label: "hello") { print("   a block performed from the main thread ran on the loop's thread") }
finished.wait()
print("   the loop finished by itself once its timer was gone.")
print("done.")
