import Dispatch
import PermanentThread
import Synchronization

/// How cost grows with the work a loop holds. Each case's impls are sizes of one thing (the
/// size is in the JSON row); the table compares each size with the smallest of the same run.
enum ScaleBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let messages = scale.count(2000, quick: 100)
        let threads = scale.isQuick ? [10, 100] : [100, 1000]
        let clientCounts = scale.isQuick ? [1, 10] : [1, 10, 100, 1000]
        let names = names(sizes: scale.isQuick ? [10, 1000] : [10, 100, 1000, 10_000, 100_000], lookups: scale.count(500, quick: 20))
        return [
            ports(sizes: scale.isQuick ? [10, 1000] : [10, 100, 1000, 10_000], messages: messages),
            timers(sizes: scale.isQuick ? [1000, 10_000] : [1000, 10_000, 100_000], chain: scale.count(20_000, quick: 1000)),
            threadsRSS(sizes: threads),
            threadsCPU(sizes: threads, idling: scale.isQuick ? .milliseconds(100) : .seconds(1)),
            names,
            // The same with this process's threads on one CPU (the looker and the server; the
            // owner is a child): how the cost grows, free of the wake-up lottery of two CPUs.
            names.pinned(.together, as: "scale.names-same-cpu"),
            clients(sizes: clientCounts, lookups: scale.count(2000, quick: 100)),
            clientsLatency(sizes: clientCounts, lookups: scale.count(2000, quick: 100)),
            idleServer(),
            idleConnections(clients: scale.count(1000, quick: 100)),
            idleConnectionsRounds(clients: scale.count(1000, quick: 100), rounds: 3),
        ]
    }

    // MARK: scale.ports

    /// `scale.ports`: the median time of a message to a random one of `size` custom sources
    /// scheduled on one sleeping loop (each `ReceivePort` has one), from signalling it to its
    /// perform's answer, as `loop.wake-same-cpu` measures a block: caller and loop on one
    /// CPU, each message sent once the loop sleeps. Flat is the goal: a pass should cost the
    /// sources that were signalled, not the sources the loop holds.
    static func ports(sizes: [Int], messages: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.ports", unit: "µs", impls: sizes.map { size in
            LoopBenchmarks.wakeImpl("ports-\(size)", .together, messages, size: size) {
                try SourcesLoop(name: "bench-scale-ports", sources: size)
            }
        })
    }
}

extension ScaleBenchmarks {
    // MARK: scale.timers

    /// `scale.timers`: the mean cost of arming a timer and firing it on a loop that holds
    /// `size` other timers (due in an hour, each at its own date), in ns: a chain of one-shot
    /// timers due at once, each armed by the handler of the one before, all on the loop's
    /// thread. A heap makes it grow with the logarithm of the size, and nothing else should.
    static func timers(sizes: [Int], chain: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.timers", unit: "ns", impls: sizes.map { size in
            BenchmarkImpl("timers-\(size)", size: size) {
                let thread = try PortKitLoopThread(name: "bench-scale-timers")
                let loop = thread.loop
                let background = Handoff<Result<[LoopTimer], ThreadLoopError>>()
                try thread.post {
                    let start = ContinuousClock.now + .seconds(3600)
                    var timers: [LoopTimer] = []
                    timers.reserveCapacity(size)
                    do throws(ThreadLoopError) {
                        for index in 0..<size {
                            let timer = LoopTimer(fireAt: start + .microseconds(index)) { _ in }
                            try loop.add(timer, forMode: .default)
                            timers.append(timer)
                        }
                        background.put(.success(timers))
                    } catch {
                        background.put(.failure(error))
                    }
                }
                let held: [LoopTimer]
                do {
                    held = try background.take(within: .seconds(120), what: "\(size) timers to be armed").get()
                } catch {
                    thread.shutDown()
                    throw error
                }
                return .init(
                    measure: { try TimerArmChain(length: chain).run(on: loop) },
                    stop: {
                        for timer in held { timer.invalidate() }
                        thread.shutDown()
                    })
            }
        })
    }

    // MARK: scale.threads

    /// `scale.threads-rss`: how much the resident set grows per idle permanent thread, in
    /// KiB, with `size` of them started and asleep (`thread.idle-rss` divided by the size).
    static func threadsRSS(sizes: [Int]) -> BenchmarkCase {
        BenchmarkCase(name: "scale.threads-rss", unit: "KiB", impls: sizes.map { size in
            BenchmarkImpl("threads-\(size)", size: size) {
                .init(measure: {
                    let before = try ExecuteBenchmarks.residentKiB()
                    let group = try ExecuteBenchmarks.startPermanentThreads(size)
                    defer { group.stop() }
                    try group.waitUntilAsleep(timeout: .seconds(60))
                    return Double(try ExecuteBenchmarks.residentKiB() - before) / Double(size)
                })
            }
        })
    }

    /// `scale.threads-cpu`: the CPU time the process uses while `size` idle permanent threads
    /// sleep for `idling`, in ms (the caller sleeps too).
    static func threadsCPU(sizes: [Int], idling: Duration) -> BenchmarkCase {
        BenchmarkCase(name: "scale.threads-cpu", unit: "ms", impls: sizes.map { size in
            BenchmarkImpl("threads-\(size)", size: size) {
                .init(measure: {
                    let group = try ExecuteBenchmarks.startPermanentThreads(size)
                    defer { group.stop() }
                    try group.waitUntilAsleep(timeout: .seconds(60))
                    let before = ExecuteBenchmarks.processCPUTime()
                    ExecuteBenchmarks.pause(idling)
                    return (ExecuteBenchmarks.processCPUTime() - before).microseconds / 1000
                })
            }
        })
    }
}

/// One run of `scale.timers`: `length` one-shot timers due at once, each armed on the loop's
/// thread by the handler of the one before.
// Safety of @unchecked Sendable: `remaining` and `failure` are touched only on the loop's
// thread (the first timer is armed there, the others by handlers) until it signals `done`,
// after which the caller reads `failure`.
private final class TimerArmChain: @unchecked Sendable {
    private var remaining: Int
    private var failure: ThreadLoopError?
    private let length: Int
    private let done = DispatchSemaphore(value: 0)

    init(length: Int) {
        self.length = length
        remaining = length
    }

    /// Runs the chain on `loop`; the mean arm + fire cost in ns.
    func run(on loop: ThreadLoop) throws -> Double {
        let start = ContinuousClock.now
        try loop.perform { self.armNext(on: loop) }
        let timeout = DispatchTime.now() + .seconds(60 + length / 1000)
        guard done.wait(timeout: timeout) == .success else {
            throw BenchmarkError.timedOut("a chain of \(length) timers did not end")
        }
        if let failure { throw failure }
        return (ContinuousClock.now - start).microseconds * 1000 / Double(length)
    }

    private func armNext(on loop: ThreadLoop) {
        guard remaining > 0 else {
            done.signal()
            return
        }
        remaining -= 1
        let timer = LoopTimer(fireAt: .now) { [self] _ in armNext(on: loop) }
        do {
            try loop.add(timer, forMode: .default)
        } catch {
            failure = error
            done.signal()
        }
    }
}

/// A PortKit loop holding `count` custom sources in its default mode; a posted block reaches
/// it by signalling a random one of them, whose perform runs it.
final class SourcesLoop: SleepingLoop {
    /// The kernel id of the loop's thread.
    var threadID: CInt { thread.threadID }
    private let thread: PortKitLoopThread
    private let sources: [LoopSource]
    private let next = NextBlock()

    /// The block on its way and the state of the random choice of source.
    private final class NextBlock: Sendable {
        let state = Mutex<(block: (@Sendable () -> Void)?, choice: RandomChoice)>((nil, RandomChoice()))
    }

    /// Starts the loop's thread and schedules the sources; returns once the loop holds them all.
    /// - Throws: `BenchmarkError` when the thread cannot start or a source cannot be added.
    init(name: String, sources count: Int) throws {
        thread = try PortKitLoopThread(name: name)
        let next = self.next
        sources = (0..<count).map { _ in
            LoopSource(perform: { next.state.withLock { slot in defer { slot.block = nil }; return slot.block }?() })
        }
        do {
            for source in sources { try thread.loop.add(source, forMode: .default) }
            // Changes from another thread are carried out in order: once this block ran, all are in.
            let added = Handoff<Bool>()
            try thread.post { added.put(true) }
            _ = try added.take(within: .seconds(60), what: "\(name) to schedule \(count) sources")
        } catch {
            thread.shutDown()
            throw error
        }
    }

    /// Has the loop run `block` by signalling a random source.
    func post(_ block: @escaping @Sendable () -> Void) throws {
        let index = next.state.withLock { slot -> Int in
            slot.block = block
            return slot.choice.next(below: sources.count)
        }
        sources[index].signal()
    }

    /// Stops the loop and joins its thread; the sources are cancelled as the thread ends.
    func shutDown() { thread.shutDown() }
}
