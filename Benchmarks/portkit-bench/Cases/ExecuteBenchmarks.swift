import Dispatch
import Glibc
import PermanentThread
import Synchronization

/// `PermanentThread` against its baselines: handing blocks to a kept-alive thread (one at
/// a time, by the million, synchronously) and what 100 idle ones cost.
///
/// The baselines: `dispatch` (a serial `DispatchQueue`), `foundation` (a Foundation
/// `Thread` running its `RunLoop`, see `FoundationLoopThread`) and `pthread` (a pthread
/// with a mutex and condition-variable closure queue, `ConditionQueueThread`).
enum ExecuteBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let roundTrips = scale.count(2000, quick: 100)
        let blocks = scale.count(1_000_000, quick: 20_000)
        let idleThreads = scale.count(100, quick: 10)
        return [
            roundTrip(roundTrips),
            roundTripBackToBack(roundTrips),
            throughput("execute.throughput-1p", blocks: blocks, producers: 1),
            throughput("execute.throughput-4p", blocks: blocks, producers: 4),
            sync(roundTrips),
            sync(roundTrips).pinned(.together, as: "execute.sync-same-cpu"),
            idleRSS(threads: idleThreads),
            idleCPU(threads: idleThreads, idling: scale.isQuick ? .milliseconds(100) : .seconds(1)),
        ]
    }

    /// Every impl of the execute cases, each started fresh for the case.
    private static func targetImpls(_ measurement: some TargetMeasurement) -> [BenchmarkImpl] {
        [
            targetImpl("portkit", measurement) { try PermanentThreadTarget(name: "bench-exec-pk") },
            targetImpl("dispatch", measurement) { DispatchTarget(label: "bench-exec-dispatch") },
            targetImpl("foundation", measurement) { try FoundationLoopThread(name: "bench-exec-fdn") },
            targetImpl("pthread", measurement) { try ConditionQueueThread(name: "bench-exec-pth") },
        ]
    }

    private static func targetImpl<Target: BlockTarget>(
        _ name: String, _ measurement: some TargetMeasurement, start: @escaping () throws -> Target
    ) -> BenchmarkImpl {
        BenchmarkImpl(name) {
            let target = try start()
            return .init(measure: { try measurement.measure(target) }, stop: target.shutDown)
        }
    }

    // MARK: execute.roundtrip

    /// `execute.roundtrip`: the median time from posting a block that signals back to the
    /// caller seeing the signal (`SpinReply`, the same for every impl), each posted to an
    /// idle target: the caller first sleeps `idleGap`.
    ///
    /// Back to back, a round trip raced the executing thread's return to sleep: when the next
    /// block came before it slept, no wake-up was needed, and the same impl measured 0.5 µs
    /// or 10 µs from one run to the next depending on the machine's load.
    ///
    /// No thread is pinned: Dispatch's workers cannot be, and a worker made while the caller
    /// is pinned inherits the caller's CPU, so every impl is left to the scheduler.
    static func roundTrip(_ count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "execute.roundtrip", unit: "µs", impls: targetImpls(RoundTrips(count: count)))
    }

    /// One run of `execute.roundtrip`: `count` round trips; their median and p99 in µs.
    struct RoundTrips: TargetMeasurement {
        let count: Int
        /// Every impl's thread is back asleep within microseconds of running a block.
        var idleGap: Duration = .microseconds(200)

        func measure<Target: BlockTarget>(_ target: Target) throws -> RunSample {
            let reply = SpinReply()
            var samples: [Double] = []
            samples.reserveCapacity(count)
            for number in 1...count {
                if idleGap > .zero { pause(idleGap) }
                let start = ContinuousClock.now
                try target.post { reply.send(number) }
                try reply.spin(until: number)
                samples.append(start.duration(to: .now).microseconds)
            }
            return RunSample(latencies: samples)
        }
    }

    /// `execute.roundtrip-b2b`: `execute.roundtrip` with each block posted as soon as the
    /// previous one signalled back, and one more impl: `portkit-spin`, a permanent thread
    /// made with `spinBeforeSleep` (`spinWindow`), which is awake when the next block comes.
    static func roundTripBackToBack(_ count: Int) -> BenchmarkCase {
        let measurement = RoundTrips(count: count, idleGap: .zero)
        return BenchmarkCase(name: "execute.roundtrip-b2b", unit: "µs", impls: targetImpls(measurement) + [
            targetImpl("portkit-spin", measurement) {
                try PermanentThreadTarget(name: "bench-exec-spin", spinBeforeSleep: spinWindow)
            },
        ])
    }

    /// The spin of the `portkit-spin` impls: a few wake-ups' worth.
    static let spinWindow: Duration = .microseconds(50)

    // MARK: execute.throughput

    /// `execute.throughput-1p`, `-4p`: `blocks` tiny blocks posted by `producers` threads
    /// (the caller itself for one), in blocks per second from the first post until the
    /// executing thread has run the last block. Higher is better.
    static func throughput(_ name: String, blocks: Int, producers: Int) -> BenchmarkCase {
        precondition(blocks % producers == 0, "the blocks split evenly between the producers")
        return BenchmarkCase(
            name: name, unit: "blocks/s", impls: targetImpls(Throughput(blocks: blocks, producers: producers)))
    }

    /// One run of a throughput case; blocks per second.
    struct Throughput: TargetMeasurement {
        let blocks: Int
        let producers: Int

        func measure<Target: BlockTarget>(_ target: Target) throws -> RunSample {
            let sink = BlockSink(expected: blocks)
            let start: ContinuousClock.Instant
            if producers == 1 {
                start = .now
                for _ in 0..<blocks { try target.post { sink.ran() } }
            } else {
                start = try postFromThreads(target, sink)
            }
            let end = try sink.waitUntilDone(timeout: .seconds(120))
            return RunSample(value: Double(blocks) / ((end - start).microseconds / 1e6))
        }

        /// Starts the producers, lets them all go at once, waits until they have posted
        /// their share and returns when they were let go.
        private func postFromThreads<Target: BlockTarget>(_ target: Target, _ sink: BlockSink) throws -> ContinuousClock.Instant {
            let share = blocks / producers
            let go = DispatchSemaphore(value: 0)
            let failure = Mutex<String?>(nil)
            var threads: [PosixThread] = []
            var released = false
            defer {
                // Producers already started wait for `go` even when a later one failed to start.
                if !released { for _ in threads { go.signal() } }
                for thread in threads { thread.join() }
            }
            for index in 0..<producers {
                threads.append(try PosixThread.start(name: "bench-producer-\(index)") {
                    go.wait()
                    do {
                        for _ in 0..<share { try target.post { sink.ran() } }
                    } catch {
                        failure.withLock { $0 = $0 ?? "\(error)" }
                    }
                })
            }
            let start = ContinuousClock.now
            released = true
            for _ in 0..<producers { go.signal() }
            for thread in threads { thread.join() }
            threads = []
            if let message = failure.withLock({ $0 }) { throw ProducerFailed(message: message) }
            return start
        }
    }

    /// A producer of a throughput run could not post a block.
    struct ProducerFailed: Error, CustomStringConvertible {
        let message: String
        var description: String { "a producer could not post: \(message)" }
    }

    // MARK: execute.sync

    /// `execute.sync`: the median time of a synchronous round trip that returns a value,
    /// `PermanentThread.sync` against `DispatchQueue.sync` and a pthread's closure queue
    /// whose caller waits on a condition variable for the value, no thread pinned.
    ///
    /// `DispatchQueue.sync` on an idle serial queue runs the block on the caller's thread
    /// (no thread switch at all), while `PermanentThread.sync` always runs it on the
    /// permanent thread: the comparison is what callers get, not like for like. The
    /// `pthread` impl is like for like: a thread switch there and back, the caller asleep.
    /// `portkit-spin` is a permanent thread made with `spinBeforeSleep` (`spinWindow`).
    static func sync(_ count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "execute.sync", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let thread = PermanentThread(name: "bench-sync-pk")
                try thread.run()
                return .init(measure: { try medianSync(count) { number in try thread.sync { number } } }, stop: thread.stop)
            },
            BenchmarkImpl("dispatch") {
                let queue = DispatchQueue(label: "bench-sync-dispatch")
                return .init(measure: { try medianSync(count) { number in queue.sync { number } } })
            },
            BenchmarkImpl("portkit-spin") {
                let thread = PermanentThread(name: "bench-sync-spin", spinBeforeSleep: spinWindow)
                try thread.run()
                return .init(measure: { try medianSync(count) { number in try thread.sync { number } } }, stop: thread.stop)
            },
            BenchmarkImpl("pthread") {
                let thread = try ConditionQueueThread(name: "bench-sync-pth")
                let reply = ConditionReply()
                return .init(
                    measure: { try medianSync(count) { number in reply.call(on: thread) { number } } },
                    stop: thread.shutDown)
            },
        ])
    }

    private static func medianSync(_ count: Int, _ call: (Int) throws -> Int) throws -> RunSample {
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for number in 1...count {
            let start = ContinuousClock.now
            let value = try call(number)
            samples.append(start.duration(to: .now).microseconds)
            precondition(value == number, "sync returned \(value) for \(number)")
        }
        return RunSample(latencies: samples)
    }

    // MARK: thread.idle

    /// `thread.idle-rss`: how much the resident set (VmRSS) grows when `threads` idle
    /// threads are started and asleep, in KiB. Each run starts them and stops them again.
    static func idleRSS(threads: Int) -> BenchmarkCase {
        BenchmarkCase(name: "thread.idle-rss", unit: "KiB", impls: idleImpls { start in
            let before = try residentKiB()
            let group = try start(threads)
            defer { group.stop() }
            try group.waitUntilAsleep()
            return Double(try residentKiB() - before)
        })
    }

    /// `thread.idle-cpu`: the CPU time the process uses while `threads` idle threads sleep
    /// for `idling` (the caller sleeps too), in ms.
    static func idleCPU(threads: Int, idling: Duration) -> BenchmarkCase {
        BenchmarkCase(name: "thread.idle-cpu", unit: "ms", impls: idleImpls { start in
            let group = try start(threads)
            defer { group.stop() }
            try group.waitUntilAsleep()
            let before = processCPUTime()
            pause(idling)
            return (processCPUTime() - before).microseconds / 1000
        })
    }

    /// Idle threads that can be stopped, and the kernel ids to see them asleep.
    struct IdleGroup {
        let threadIDs: [CInt]
        let stop: () -> Void

        /// Waits until every thread sleeps in its loop's wait: an idle `ThreadLoop` watches no
        /// descriptor and sleeps on a futex, Foundation's CFRunLoop on Linux in `ppoll`; the
        /// kernel function either waits in (`/proc/self/task/TID/wchan`) has "poll" or
        /// "futex" in its name.
        func waitUntilAsleep(timeout: Duration = .seconds(10)) throws {
            let deadline = ContinuousClock.now + timeout
            for threadID in threadIDs {
                let path = "/proc/self/task/\(threadID)/wchan"
                let descriptor = open(path, O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { throw BenchmarkError.lastSystemError("open(\(path))") }
                defer { close(descriptor) }
                while !Self.waitsInPoll(descriptor) {
                    if ContinuousClock.now > deadline { throw BenchmarkError.timedOut("thread \(threadID) did not go idle") }
                    sched_yield()
                }
            }
        }

        private static func waitsInPoll(_ wchan: CInt) -> Bool {
            var bytes = [UInt8](repeating: 0, count: 64)
            let count = bytes.withUnsafeMutableBytes { pread(wchan, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return false }
            let function = String(decoding: bytes.prefix(count), as: UTF8.self)
            return function.contains("poll") || function.contains("futex")
        }
    }

    private static func idleImpls(_ measure: @escaping ((Int) throws -> IdleGroup) throws -> Double) -> [BenchmarkImpl] {
        [
            BenchmarkImpl("portkit", measure: { try measure { try startPermanentThreads($0) } }),
            BenchmarkImpl("portkit-spin", measure: { try measure { try startPermanentThreads($0, spinBeforeSleep: spinWindow) } }),
            BenchmarkImpl("foundation", measure: { try measure(startFoundationThreads) }),
        ]
    }

    static func startPermanentThreads(_ count: Int, spinBeforeSleep: Duration = .zero) throws -> IdleGroup {
        var threads: [PermanentThread] = []
        do {
            for index in 0..<count {
                let thread = PermanentThread(name: "bench-idle-\(index)", spinBeforeSleep: spinBeforeSleep)
                try thread.run()
                threads.append(thread)
            }
        } catch {
            for thread in threads { thread.stop() }
            throw error
        }
        return IdleGroup(threadIDs: threads.map { $0.threadID! }, stop: { for thread in threads { thread.stop() } })
    }

    private static func startFoundationThreads(_ count: Int) throws -> IdleGroup {
        var threads: [FoundationLoopThread] = []
        do {
            for index in 0..<count { threads.append(try FoundationLoopThread(name: "bench-idle-\(index)")) }
        } catch {
            for thread in threads { thread.shutDown() }
            throw error
        }
        return IdleGroup(threadIDs: threads.map(\.threadID), stop: { for thread in threads { thread.shutDown() } })
    }

    /// The process's resident set in KiB: `VmRSS` of /proc/self/status.
    static func residentKiB() throws -> Int {
        let descriptor = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw BenchmarkError.lastSystemError("open(/proc/self/status)") }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { throw BenchmarkError.lastSystemError("read(/proc/self/status)") }
        let text = String(decoding: bytes.prefix(count), as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            // "VmRSS:\t   12345 kB"
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if fields.count >= 2, let kiB = Int(fields[1]) { return kiB }
        }
        throw BenchmarkError.system(operation: "VmRSS in /proc/self/status", errno: ENOENT)
    }

    /// Sleeps for `duration` (the calling thread gives up its CPU).
    static func pause(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var left = timespec()
        while nanosleep(&request, &left) != 0 && errno == EINTR { request = left }
    }

    /// The CPU time every thread of the process has used.
    static func processCPUTime() -> Duration {
        var now = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }
}

// MARK: - What the execute cases post to

/// What one run of an execute case does with a target; generic, so that each impl's
/// `post` is called directly, not through an existential.
protocol TargetMeasurement {
    /// Performs one run on `target` and returns its sample.
    func measure<Target: BlockTarget>(_ target: Target) throws -> RunSample
}

/// A thread (or queue) that runs posted blocks one at a time, in order.
protocol BlockTarget: Sendable {
    /// Has `block` run soon on the target's thread.
    func post(_ block: @escaping @Sendable () -> Void) throws
    /// Runs what was posted, then ends the thread.
    func shutDown()
}

/// The PortKit impl: `PermanentThread.execute`.
struct PermanentThreadTarget: BlockTarget {
    let thread: PermanentThread

    init(name: String, spinBeforeSleep: Duration = .zero) throws {
        thread = PermanentThread(name: name, spinBeforeSleep: spinBeforeSleep)
        try thread.run()
    }

    func post(_ block: @escaping @Sendable () -> Void) throws { try thread.execute(block) }
    func shutDown() { thread.stop() }
}

/// The Dispatch impl: `async` on a serial queue.
struct DispatchTarget: BlockTarget {
    let queue: DispatchQueue

    init(label: String) { queue = DispatchQueue(label: label) }

    func post(_ block: @escaping @Sendable () -> Void) { queue.async(execute: block) }
    func shutDown() { queue.sync {} }
}

extension FoundationLoopThread: BlockTarget {}
extension ConditionQueueThread: BlockTarget {}

/// The blocks of one throughput run: each counts itself; the last one notes the time.
final class BlockSink: Sendable {
    /// How many blocks the run posts.
    let expected: Int
    private let count = Atomic<Int>(0)
    private let end = Mutex<ContinuousClock.Instant?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(expected: Int) {
        self.expected = expected
    }

    /// One block ran. Blocks run one at a time on the executing thread, so a load and a
    /// store count them (no read-modify-write; the target orders one block after the other).
    func ran() {
        let ran = count.load(ordering: .relaxed) &+ 1
        count.store(ran, ordering: .relaxed)
        if ran == expected {
            end.withLock { $0 = .now }
            done.signal()
        }
    }

    /// Waits until the last block ran and returns when it did.
    /// - Throws: `BenchmarkError.timedOut` if it does not within `timeout`.
    func waitUntilDone(timeout: Duration) throws(BenchmarkError) -> ContinuousClock.Instant {
        let deadline = DispatchTime.now() + .nanoseconds(Int(timeout.microseconds * 1000))
        guard done.wait(timeout: deadline) == .success, let end = end.withLock({ $0 }) else {
            throw .timedOut("\(count.load(ordering: .relaxed)) of \(expected) blocks ran")
        }
        return end
    }
}
