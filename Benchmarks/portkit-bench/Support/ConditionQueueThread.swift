import CPortKitSystem
import Glibc

/// The plain-pthread baseline of the execute benchmarks: one thread and a closure queue
/// behind a pthread mutex, with a condition variable to sleep on when the queue is empty.
///
/// `post` appends under the lock and signals only if the thread waits and nobody has
/// signalled it yet (one signal per sleep at most); the thread takes the whole queue under
/// the lock and runs it outside.
final class ConditionQueueThread: Sendable {
    /// The kernel id of the thread.
    let threadID: CInt
    private let queue: Queue
    private let thread: PosixThread

    /// The closures posted and not yet taken.
    // Safety of @unchecked Sendable: `blocks`, `waiting` and `stopping` are read and written
    // only with `mutex` held.
    private final class Queue: PthreadCondition, @unchecked Sendable {
        var blocks: [@Sendable () -> Void] = []
        /// The thread sleeps on `condition` and no signal is on its way yet.
        var waiting = false
        var stopping = false
    }

    /// Starts the thread and waits until it runs.
    /// - Throws: `BenchmarkError.system` when `pthread_create` fails.
    init(name: String) throws(BenchmarkError) {
        let queue = Queue()
        let started = Handoff<CInt>()
        thread = try PosixThread.start(name: name) {
            started.put(portkit_gettid())
            Self.serve(queue)
        }
        self.queue = queue
        threadID = try started.take(within: .seconds(10), what: "\(name) to start")
    }

    /// The thread: wait for closures, run them, until stopped with an empty queue.
    private static func serve(_ queue: Queue) {
        var batch: [@Sendable () -> Void] = []
        while true {
            pthread_mutex_lock(queue.mutex)
            while queue.blocks.isEmpty && !queue.stopping {
                queue.waiting = true
                pthread_cond_wait(queue.condition, queue.mutex)
                queue.waiting = false
            }
            swap(&batch, &queue.blocks)
            let stopping = queue.stopping
            pthread_mutex_unlock(queue.mutex)
            for block in batch { block() }
            batch.removeAll(keepingCapacity: true)
            if stopping { return }
        }
    }

    /// Queues `block` and wakes the thread if it sleeps.
    func post(_ block: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(queue.mutex)
        queue.blocks.append(block)
        let mustSignal = queue.waiting
        queue.waiting = false
        pthread_mutex_unlock(queue.mutex)
        if mustSignal { pthread_cond_signal(queue.condition) }
    }

    /// Ends the thread after the closures already posted and joins it.
    func shutDown() {
        pthread_mutex_lock(queue.mutex)
        queue.stopping = true
        pthread_mutex_unlock(queue.mutex)
        pthread_cond_signal(queue.condition)
        thread.join()
    }
}

/// The waiting half of the pthread impl of `execute.sync`: one caller's reply, made once and
/// reused, which the caller sleeps on under a mutex and condition variable until the
/// `ConditionQueueThread` has stored the value.
// Safety of @unchecked Sendable: `value` and `done` are read and written only with `mutex` held.
final class ConditionReply: PthreadCondition, @unchecked Sendable {
    private var value = 0
    private var done = false

    /// Posts `body` to `thread` and sleeps until it has run there; returns its value. One
    /// caller at a time.
    func call(on thread: ConditionQueueThread, _ body: @escaping @Sendable () -> Int) -> Int {
        pthread_mutex_lock(mutex)
        done = false
        pthread_mutex_unlock(mutex)
        thread.post { [self] in
            let result = body()
            pthread_mutex_lock(mutex)
            value = result
            done = true
            pthread_mutex_unlock(mutex)
            pthread_cond_signal(condition)
        }
        pthread_mutex_lock(mutex)
        while !done { pthread_cond_wait(condition, mutex) }
        let result = value
        pthread_mutex_unlock(mutex)
        return result
    }
}

/// A pthread mutex and condition variable at fixed heap addresses for the object's life: the
/// base of the pthread baselines, whose subclasses guard their own state with them.
// Safety of @unchecked Sendable: the two are only used through the pthread functions, which
// are thread-safe; the storage is freed in deinit, when no thread can use it any more.
class PthreadCondition: @unchecked Sendable {
    let mutex: UnsafeMutablePointer<pthread_mutex_t>
    let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }
}
