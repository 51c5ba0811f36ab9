import Dispatch
import Foundation
import Glibc
import Synchronization
import Testing
@testable import PermanentThread
import PortKitLocks

/// One item of a test: which producer pushed it, and its rank among that producer's pushes.
private struct Item: Sendable, Equatable {
    let producer: Int
    let index: Int
}

/// A count shared between threads.
private final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

/// Counts its instances that were destroyed.
private final class Tracked: Sendable {
    let deaths: Counter
    init(_ deaths: Counter) { self.deaths = deaths }
    deinit { deaths.value.add(1, ordering: .relaxed) }
}

/// Runs `body(producer)` on `count` new threads at once; returns a function that waits
/// for them all.
private func startProducers(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) -> () -> Void {
    let done = DispatchSemaphore(value: 0)
    for producer in 0..<count {
        let thread = Thread {
            body(producer)
            done.signal()
        }
        thread.name = "queue-producer-\(producer)"
        thread.start()
    }
    return { for _ in 0..<count { done.wait() } }
}

@Suite("WorkQueue: the loop's inbox alone")
struct WorkQueueTests {
    @Test func eightProducersEveryItemOnceInProducerOrder() {
        let producers = 8, perProducer = 20_000
        // 160,000 items: some 2,500 segments, freed and reused as the consumer goes.
        let queue = WorkQueue<Item>()
        let join = startProducers(producers) { producer in
            for index in 0..<perProducer {
                #expect(queue.push { Item(producer: producer, index: index) })
            }
        }
        var next = [Int](repeating: 0, count: producers)
        var taken = 0
        while taken < producers * perProducer {
            guard let item = queue.pop() else {
                sched_yield()
                continue
            }
            #expect(item.index == next[item.producer])
            next[item.producer] = item.index + 1
            taken += 1
        }
        join()
        #expect(queue.pop() == nil)
        #expect(queue.isEmpty)
        #expect(next == [Int](repeating: perProducer, count: producers))
    }

    @Test func closingWhileProducersPushLosesNothing() {
        let producers = 8
        let queue = WorkQueue<Item>()
        // `Locked`, not `Mutex`: ThreadSanitizer does not see `Mutex` and reports its writes as races.
        let pushed = Locked([Int](repeating: 0, count: producers))
        let join = startProducers(producers) { producer in
            var index = 0
            while queue.push({ Item(producer: producer, index: index) }) { index += 1 }
            pushed.withLock { $0[producer] = index }
        }
        var next = [Int](repeating: 0, count: producers)
        var taken = 0
        func take(_ item: Item) {
            #expect(item.index == next[item.producer])
            next[item.producer] = item.index + 1
            taken += 1
        }
        // Close once the producers are well under way, while they push.
        while taken < 50_000 {
            if let item = queue.pop() { take(item) } else { sched_yield() }
        }
        #expect(queue.close())
        #expect(!queue.close())
        #expect(queue.isClosed)
        join()
        // Every push that succeeded was before the close: drained now, none lost.
        while let item = queue.pop() { take(item) }
        #expect(queue.isEmpty)
        #expect(next == pushed.withLock { $0 })
        #expect(!queue.push { Item(producer: 0, index: -1) })
    }

    @Test func closingPushIsTheLastOne() {
        let queue = WorkQueue<Item>()
        #expect(queue.isEmpty)
        #expect(queue.push { Item(producer: 0, index: 0) })
        #expect(!queue.isEmpty)
        #expect(queue.push(closing: true) { Item(producer: 0, index: 1) })
        #expect(queue.isClosed)
        var ran = false
        #expect(!queue.push { ran = true; return Item(producer: 0, index: 2) })
        #expect(!ran)
        #expect(queue.pop() == Item(producer: 0, index: 0))
        #expect(queue.pop() == Item(producer: 0, index: 1))
        #expect(queue.pop() == nil)
        #expect(queue.isEmpty)
    }

    @Test func elementsLeftAreDestroyedWithTheQueue() {
        let deaths = Counter()
        do {
            let queue = WorkQueue<Tracked>()
            // Across segments, some taken, the rest left in the queue.
            for _ in 0..<1000 { #expect(queue.push { Tracked(deaths) }) }
            for _ in 0..<300 { #expect(queue.pop() != nil) }
            #expect(deaths.value.load(ordering: .relaxed) == 300)
        }
        #expect(deaths.value.load(ordering: .relaxed) == 1000)
    }
}
