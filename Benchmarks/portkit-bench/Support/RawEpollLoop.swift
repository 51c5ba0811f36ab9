import CPortKitSystem
import Glibc
import Synchronization

/// The baseline of the wake benchmark: about the least a loop can do to sleep until given
/// a block. One pthread waits in `epoll_wait` on an eventfd; `post` appends the block to a
/// mutex-protected queue and writes the eventfd; the thread drains the eventfd, takes the
/// whole queue under the lock and runs it outside the lock.
final class RawEpollLoop: Sendable {
    /// The kernel id of the loop's thread.
    let threadID: CInt
    private let epollDescriptor: CInt
    private let eventDescriptor: CInt
    private let queue: Queue
    private let thread: PosixThread

    /// The blocks posted and not yet taken, and whether the loop should end.
    private final class Queue: Sendable {
        struct State {
            var blocks: [@Sendable () -> Void] = []
            var stopping = false
        }
        let state = Mutex(State())
    }

    /// Makes the epoll instance and the eventfd, starts the thread and waits until it runs.
    /// - Throws: `BenchmarkError.system` when a descriptor or the thread cannot be made.
    init(name: String) throws(BenchmarkError) {
        let eventDescriptor = eventfd(0, CInt(EFD_CLOEXEC) | CInt(EFD_NONBLOCK))
        guard eventDescriptor >= 0 else { throw .lastSystemError("eventfd") }
        let epollDescriptor: CInt
        do {
            epollDescriptor = try RawSockets.epoll(watchingInput: eventDescriptor)
        } catch {
            _ = close(eventDescriptor)
            throw error
        }
        let queue = Queue()
        let started = Handoff<CInt>()
        do {
            thread = try PosixThread.start(name: name) {
                started.put(portkit_gettid())
                Self.serve(epoll: epollDescriptor, event: eventDescriptor, queue: queue)
            }
        } catch {
            _ = close(eventDescriptor)
            _ = close(epollDescriptor)
            throw error
        }
        self.epollDescriptor = epollDescriptor
        self.eventDescriptor = eventDescriptor
        self.queue = queue
        threadID = try started.take(within: .seconds(10), what: "\(name) to start")
    }

    /// The loop's thread: sleep, drain the eventfd, run the queued blocks; until stopped.
    private static func serve(epoll: CInt, event: CInt, queue: Queue) {
        var ready = epoll_event()
        while true {
            let count = epoll_wait(epoll, &ready, 1, -1)
            if count < 0 {
                if errno == EINTR { continue }
                fatalError("RawEpollLoop: epoll_wait failed: \(String(cString: strerror(errno)))")
            }
            var counter: UInt64 = 0
            _ = read(event, &counter, MemoryLayout<UInt64>.size)
            var blocks: [@Sendable () -> Void] = []
            let stopping = queue.state.withLock { state in
                swap(&blocks, &state.blocks)
                return state.stopping
            }
            for block in blocks { block() }
            if stopping { return }
        }
    }

    /// Queues `block` and wakes the loop (one eventfd write per post, no coalescing).
    func post(_ block: @escaping @Sendable () -> Void) {
        queue.state.withLock { $0.blocks.append(block) }
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(eventDescriptor, &one, MemoryLayout<UInt64>.size)
    }

    /// Ends the loop after the blocks already posted, joins the thread, closes the descriptors.
    func shutDown() {
        queue.state.withLock { $0.stopping = true }
        wake()
        thread.join()
        _ = close(eventDescriptor)
        _ = close(epollDescriptor)
    }
}
