import Testing
import Glibc
import Synchronization
import CPortKitSystem
import PortKitTestSupport
@testable import PermanentThread
import PortKitLocks

// MARK: Helpers shared by the PermanentThread and StallMonitor tests

/// A value behind a lock, for blocks running on other threads to record into.
final class Shared<Value: Sendable>: Sendable {
    private let storage: Locked<Value>
    init(_ value: Value) { storage = Locked(value) }
    var value: Value { storage.withLock { $0 } }
    func update<R: Sendable>(_ body: (inout Value) -> R) -> R { storage.withLock { body(&$0) } }
}

/// A thread-exit hook: a thread-specific value whose destructor opens a latch. glibc runs
/// these destructors as the thread exits, before `pthread_join` on it can return.
private let exitHookKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { raw in
        guard let raw else { return }
        Unmanaged<TestLatch>.fromOpaque(raw).takeRetainedValue().open()
    }
    return key
}()

/// Opens `latch` when the calling thread exits.
func openWhenThisThreadExits(_ latch: TestLatch) {
    pthread_setspecific(exitHookKey, Unmanaged.passRetained(latch).toOpaque())
}

/// Whether the kernel still lists thread `id` in this process.
func taskExists(_ id: Int32) -> Bool {
    access("/proc/self/task/\(id)", F_OK) == 0
}

/// The name the OS shows for thread `id`.
func osThreadName(_ id: Int32) -> String? {
    let fd = open("/proc/self/task/\(id)/comm", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 64)
    let count = read(fd, &buffer, buffer.count)
    guard count > 0 else { return nil }
    return String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: "\n")
}

extension String {
    func trimmingCharacters(in character: Character) -> String {
        var text = self
        while text.last == character { text.removeLast() }
        return text
    }
}

struct Boom: Error, Equatable {
    let code: Int
}

// MARK: execute, sync, submit

@Suite("PermanentThread: execute, sync, submit")
struct PermanentThreadTests {
    @Test func blocksFromEightThreadsRunOnceEachInProducerOrderOnTheThread() throws {
        let target = PermanentThread(name: "fifo-target")
        try target.run()
        let targetID = try #require(target.threadID)
        let producers = (0..<8).map { PermanentThread(name: "producer-\($0)") }
        for producer in producers { try producer.run() }
        let perProducer = 2_000
        let log = Shared<[(producer: Int, sequence: Int, thread: Int32)]>([])
        let refused = Atomic<Int>(0)

        for (index, producer) in producers.enumerated() {
            try producer.execute {
                for sequence in 0..<perProducer {
                    do {
                        try target.execute {
                            let thread = portkit_gettid()
                            log.update { $0.append((index, sequence, thread)) }
                        }
                    } catch {
                        refused.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        // Each producer has executed all its blocks once its sync returns; the target's
        // sync then comes after all of them in its queue.
        for producer in producers { try producer.sync {} }
        try target.sync {}

        let entries = log.value
        #expect(refused.load(ordering: .relaxed) == 0)
        #expect(entries.count == 8 * perProducer)
        #expect(entries.allSatisfy { $0.thread == targetID })
        for index in 0..<8 {
            let sequences = entries.filter { $0.producer == index }.map(\.sequence)
            #expect(sequences == Array(0..<perProducer), "producer \(index): each block once, in order")
        }
        for producer in producers { producer.stop() }
        target.stop()
    }

    @Test func syncReturnsTheBlocksValueFromTheThread() throws {
        let thread = PermanentThread(name: "sync-value")
        try thread.run()
        let (value, ranOn) = try thread.sync { (42, portkit_gettid()) }
        #expect(value == 42)
        #expect(ranOn == thread.threadID)
        // The block may capture and mutate the caller's state: the caller waits meanwhile.
        var counter = 0
        try thread.sync { counter += 1 }
        #expect(counter == 1)
        thread.stop()
    }

    @Test func syncRethrowsTheBlocksError() throws {
        let thread = PermanentThread(name: "sync-throw")
        try thread.run()
        #expect(throws: ThreadCallError.body(Boom(code: 7))) {
            try thread.sync { () throws(Boom) -> Int in throw Boom(code: 7) }
        }
        // The thread is fine afterwards.
        #expect(try thread.sync { 1 } == 1)
        thread.stop()
    }

    @Test func syncOnTheThreadItselfRunsInline() throws {
        let thread = PermanentThread(name: "sync-inline")
        try thread.run()
        let order = Shared<[String]>([])
        let value = try thread.sync {
            order.update { $0.append("outer begins") }
            let inner = try thread.sync {
                order.update { $0.append("inner on thread: \(thread.isCurrent)") }
                return 5
            }
            order.update { $0.append("outer ends") }
            return inner * 2
        }
        #expect(value == 10)
        #expect(order.value == ["outer begins", "inner on thread: true", "outer ends"])

        // Also from a fire-and-forget block.
        let done = TestLatch()
        let fromExecute = Shared<Int?>(nil)
        try thread.execute {
            fromExecute.update { $0 = try? thread.sync { 3 } }
            done.open()
        }
        #expect(done.wait())
        #expect(fromExecute.value == 3)
        thread.stop()
    }

    @Test func submitReturnsTheValueAndRethrows() async throws {
        let thread = PermanentThread(name: "submit")
        try thread.run()
        let expected = thread.threadID
        let ranOn = try await thread.submit { portkit_gettid() }
        #expect(ranOn == expected)
        #expect(try await thread.submit { "value" } == "value")
        await #expect(throws: ThreadCallError.body(Boom(code: 3))) {
            try await thread.submit { () throws(Boom) -> Int in throw Boom(code: 3) }
        }
        thread.stop()
    }

    @Test func blocksExecutedBeforeRunWaitForTheStart() throws {
        let thread = PermanentThread(name: "early")
        let ran = Shared<[Int]>([])
        for index in 0..<3 { try thread.execute { ran.update { $0.append(index) } } }
        #expect(throws: ThreadCallError<Never>.thread(.notStarted)) { try thread.sync {} }
        #expect(thread.loop == nil)
        try thread.run()
        try thread.run()  // idempotent
        try thread.sync {}
        #expect(ran.value == [0, 1, 2])
        thread.stop()
    }

    @Test func theOSSeesTheThreadsNameAndStackSize() throws {
        let named = PermanentThread(name: "pt-named")
        try named.run()
        #expect(osThreadName(try #require(named.threadID)) == "pt-named")

        let long = PermanentThread(name: "a-rather-long-permanent-thread-name")
        try long.run()
        #expect(osThreadName(try #require(long.threadID)) == "a-rather-long-p")  // first 15 bytes

        typealias GetAttributes = @convention(c) (pthread_t, UnsafeMutablePointer<pthread_attr_t>?) -> CInt
        let getAttributes = unsafeBitCast(try #require(dlsym(dlopen(nil, RTLD_NOW), "pthread_getattr_np")), to: GetAttributes.self)
        let requested = 1 << 20
        let sized = PermanentThread(name: "pt-stack", stackSize: requested)
        try sized.run()
        let actual = try sized.sync { () -> Int in
            var attributes = pthread_attr_t()
            _ = getAttributes(pthread_self(), &attributes)
            defer { pthread_attr_destroy(&attributes) }
            var size = 0
            pthread_attr_getstacksize(&attributes, &size)
            return size
        }
        #expect(actual >= requested && actual < requested + 256 * 1024, "stack size \(actual)")

        let tooSmall = PermanentThread(name: "pt-tiny", stackSize: 1024)
        #expect(throws: PermanentThreadError.system(SystemCallError(operation: "pthread_create", errno: EINVAL))) { try tooSmall.run() }
        for thread in [named, long, sized] { thread.stop() }
    }

    @Test func theRunLoopIsReachableForTimersObserversAndSources() throws {
        let thread = PermanentThread(name: "pt-loop")
        try thread.run()
        let loop = try #require(thread.loop)

        let timerFired = TestLatch()
        let timerOnThread = Shared(false)
        try loop.add(LoopTimer(after: .milliseconds(5)) { _ in
            timerOnThread.update { $0 = thread.isCurrent }
            timerFired.open()
        }, forMode: .common)
        #expect(timerFired.wait())
        #expect(timerOnThread.value)

        var fds: [CInt] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let readable = TestLatch()
        let readOnThread = Shared(false)
        let source = DescriptorSource(descriptor: fds[0]) { source, _ in
            var byte: UInt8 = 0
            _ = read(source.descriptor, &byte, 1)
            readOnThread.update { $0 = thread.isCurrent }
            source.invalidate()
            readable.open()
        }
        try loop.add(source, forMode: .common)
        var byte: UInt8 = 1
        #expect(write(fds[1], &byte, 1) == 1)
        #expect(readable.wait())
        #expect(readOnThread.value)
        thread.stop()
    }

    @Test func anIdleThreadSleepsWithoutPolling() throws {
        let thread = PermanentThread(name: "pt-idle")
        try thread.run()
        let wakes = Shared(0)
        try #require(thread.loop).add(LoopObserver(activities: .afterWaiting) { _, _ in
            wakes.update { $0 += 1 }
        }, forMode: .common)
        try thread.sync {}  // the observer is in place
        let before = try thread.sync { wakes.value }
        // An observation window, not synchronisation: an idle loop must not wake up in it.
        usleep(300_000)
        let after = try thread.sync { wakes.value }
        #expect(after - before <= 2, "an idle permanent thread woke \(after - before) times in 300 ms")
        thread.stop()
    }
}
