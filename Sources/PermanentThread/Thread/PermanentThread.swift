import Glibc

/// A thread that stays alive, asleep in its run loop, until it is stopped: work is sent to
/// it from any thread and runs on it, one block at a time, in order.
///
/// ```swift
/// let worker = PermanentThread(name: "db")
/// try worker.run()
/// try worker.execute { /* on "db" */ }
/// let rows = try worker.sync { try database.query() }
/// let count = try await worker.submit { database.count }
/// worker.stop()
/// ```
///
/// The thread is kept alive by a custom source on its loop that nothing signals, so an
/// idle thread sleeps in the kernel: no polling, no periodic timer. Its loop
/// (`loop`) takes timers, observers and sources like any other.
///
/// **Stopping.** `stop()` lets the block being run finish, runs every block accepted
/// before it, then ends the thread and waits until it has exited. Blocks offered after
/// `stop()` are refused with `PermanentThreadError.stopped`: no block is ever dropped
/// silently. Dropping the last reference to a `PermanentThread` stops it the same way.
/// Should its loop fail (the kernel refuses a wait on its poller's descriptor), the thread
/// stops on its own the same way, and later work is refused with `.loop` and that failure.
/// The thread itself holds no reference to this object, so it cannot keep its owner alive.
/// (Handlers you leave on its loop — a repeating timer, a source — that capture the
/// `PermanentThread` strongly do keep it alive: capture it `weak`, or use
/// `ThreadLoop.current` inside them.)
///
/// **Executors.** A permanent thread is a `SerialExecutor` (an actor whose
/// `unownedExecutor` is `thread.asUnownedSerialExecutor()` runs every method on the
/// thread; keep a strong reference to the thread in the actor) and a `TaskExecutor`
/// (`Task(executorPreference: thread) { … }` runs on it, from one `await` to the next
/// without a pass of the loop in between).
public final class PermanentThread: Sendable {
    /// The thread's name. The OS shows its first 15 bytes (`/proc/self/task/*/comm`, `top -H`).
    public let name: String
    /// The stack size asked for, in bytes; `nil` for the system default.
    public let stackSize: Int?
    let core: ThreadCore
    /// The thread as its actors' serial executor (`asUnownedSerialExecutor()`).
    let isolation: ThreadIsolation

    /// How long the thread keeps its CPU, spinning, once it has run out of work, before it
    /// sleeps; zero (the default) to sleep at once.
    ///
    /// Work that comes during the spin starts without a wake-up: a producer that posts
    /// back to back gets round trips under the kernel's wake-up floor (a sleeping thread
    /// takes several microseconds to wake, tens on an idle CPU). The price is up to this
    /// much CPU after every burst of work, taken from other threads when CPUs are scarce;
    /// once the spin has passed, an idle thread sleeps and costs nothing, as without it.
    /// Only a loop that watches no descriptor spins (one with descriptors, ports over
    /// sockets say, sleeps in the poller at once), and never past its next timer.
    public var spinBeforeSleep: Duration { core.spinBeforeSleep }

    /// Makes a permanent thread that sleeps as soon as it runs out of work; `run()` starts it.
    /// - Parameters:
    ///   - name: the thread's name, also shown by the OS (first 15 bytes) and in stall reports.
    ///   - stackSize: the stack size in bytes (at least `PTHREAD_STACK_MIN`, 16 KiB on
    ///     Linux); `nil` (the default) for the system default, usually 8 MiB.
    public init(name: String, stackSize: Int? = nil) {
        // Designated, not convenience: code built against this initializer links unchanged.
        self.name = name
        self.stackSize = stackSize
        self.core = ThreadCore(name: name, stackSize: stackSize)
        self.isolation = ThreadIsolation(core: core)
        isolation.attach(self)
    }

    /// Makes a permanent thread that spins for up to `spinBeforeSleep` before it sleeps;
    /// `run()` starts it.
    /// - Parameters:
    ///   - name: the thread's name, also shown by the OS (first 15 bytes) and in stall reports.
    ///   - stackSize: the stack size in bytes (at least `PTHREAD_STACK_MIN`, 16 KiB on
    ///     Linux); `nil` (the default) for the system default, usually 8 MiB.
    ///   - spinBeforeSleep: how long the idle thread spins before it sleeps; zero for never
    ///     (what the other initializer gives). See `spinBeforeSleep` for the trade-off.
    public init(name: String, stackSize: Int? = nil, spinBeforeSleep: Duration) {
        self.name = name
        self.stackSize = stackSize
        self.core = ThreadCore(name: name, stackSize: stackSize, spinBeforeSleep: max(spinBeforeSleep, .zero))
        self.isolation = ThreadIsolation(core: core)
        isolation.attach(self)
    }

    /// Stops the thread, as `stop()` does; when the last reference goes away on the thread
    /// itself, the thread is detached instead of joined and exits after its queued blocks.
    deinit {
        core.stop(fromDeinit: true)
    }

    // MARK: Lifecycle

    /// Starts the thread and returns once its run loop takes work. Calling it again (from
    /// any thread, even concurrently) does nothing more.
    ///
    /// Blocks executed before `run()` are kept and run first, in order.
    /// - Throws: `.system` (`pthread_create`) when the OS refuses the thread (or the stack size),
    ///   `.loop` when its run loop cannot be made (out of descriptors), `.stopped` after
    ///   `stop()`: a stopped thread does not start again.
    public func run() throws(PermanentThreadError) {
        try core.start()
    }

    /// Stops the thread: the block it is running finishes, every block accepted before this
    /// call runs, then the thread exits; returns once it has exited.
    ///
    /// Safe from any thread, any number of times (later callers wait for the same exit).
    /// Called on the thread itself (from a block, a timer or a task on it), it cannot wait
    /// for its own exit: it returns at once and the thread exits when the current block
    /// and the ones queued before have run. If the thread was never started but blocks
    /// were executed, it is started to run them. Afterwards `execute`, `sync` and `submit`
    /// throw `PermanentThreadError.stopped`.
    public func stop() {
        core.stop(fromDeinit: false)
    }

    /// The thread's run loop, to add timers, observers and sources to; `nil` until `run()`.
    /// It stays reachable after the thread ended (and then refuses work).
    public var loop: ThreadLoop? { core.loop }

    /// The thread's kernel id (as in `/proc/self/task/<id>`, `gettid()`); `nil` until `run()`.
    public var threadID: Int32? {
        let id = core.kernelID.load(ordering: .acquiring)
        return id == 0 ? nil : id
    }

    /// Whether the calling thread is this permanent thread.
    public var isCurrent: Bool { core.isCurrent }

    /// Whether `stop()` was called (or the last reference dropped): no more work is taken,
    /// though the thread may still be running the blocks accepted before.
    public var isStopRequested: Bool { core.isStopRequested }

    // MARK: Work

    /// Runs `block` on the thread, asynchronously: returns at once.
    ///
    /// Blocks run one at a time in the order they were executed from any one thread.
    /// Before `run()` they are kept and run once the thread starts.
    /// - Parameters:
    ///   - label: a name for the work, shown by the stall monitor if the block stalls.
    ///   - block: the work.
    /// - Throws: `.stopped` after `stop()`; `.loop` with the failure when the thread's loop
    ///   failed and the thread stopped on its own. The block is not kept.
    public func execute(label: String? = nil, _ block: @escaping @Sendable () -> Void) throws(PermanentThreadError) {
        // Hot path: one atomic load and a slot of the loop's lock-free inbox; no allocation
        // but the closure.
        if let loop = core.publishedLoop.load(ordering: .acquiring) {
            // Not retained for the call: `core` holds the loop as long as `self` lives, and
            // a retain and release of a loop that every sender shares are two contended
            // atomic operations per block.
            let accepted = loop._withUnsafeGuaranteedRef { loop in
                do {
                    try loop.performInCommonModes(label: label, block)
                    return true
                } catch {
                    return false
                }
            }
            guard accepted else { throw core.refusal }
            return
        }
        try core.executeSlowly(label: label, block)
    }

    /// Runs `body` on the thread and waits for it: returns its value or throws its error
    /// (`performSelector:onThread:withObject:waitUntilDone:YES`).
    ///
    /// Called on the thread itself, `body` runs at once, inline: no self-deadlock. Two
    /// threads that `sync` onto each other at the same time deadlock, as with any lock.
    /// - Parameters:
    ///   - label: a name for the work, shown by the stall monitor if it stalls.
    ///   - body: the work; it may capture non-`Sendable` state, since the caller is
    ///     blocked while it runs.
    /// - Throws: `.body` with what `body` throws; `.thread(.stopped)` after `stop()`, or
    ///   `.thread(.notStarted)` before `run()` (waiting would never end) — then `body` does
    ///   not run.
    public func sync<T, Failure: Error>(
        label: String? = nil, _ body: () throws(Failure) -> T
    ) throws(ThreadCallError<Failure>) -> T {
        if core.isCurrent { return try Self.run(body) }
        guard let loop = core.loop else {
            throw .thread(core.isStopRequested ? core.refusal : .notStarted)
        }
        // The job's context is on this stack; the rest is the calling thread's `SyncSlot`.
        var result: Result<T, ThreadCallError<Failure>>?
        do throws(ThreadLoopError) {
            try SyncSlot.call(on: loop, label: label) { result = Result { () throws(ThreadCallError<Failure>) in try Self.run(body) } }
        } catch {
            throw .thread(core.refusal)
        }
        return try result.unsafelyUnwrapped.get()
    }

    /// Runs `body`, its error as the call's `.body`.
    private static func run<T, Failure: Error>(_ body: () throws(Failure) -> T) throws(ThreadCallError<Failure>) -> T {
        do throws(Failure) {
            return try body()
        } catch {
            throw .body(error)
        }
    }

    /// Runs `body` on the thread and suspends until it returns: `try await thread.submit { … }`.
    ///
    /// Before `run()`, the block waits for the thread to start.
    ///
    /// **Cancellation.** If the awaiting task is cancelled before the block starts (while it
    /// waits behind other work, or before it is submitted), the block never runs and this
    /// throws `.thread(.cancelledBeforeStart)` at once. Once the block has started,
    /// cancelling changes nothing: the block runs to its end and its result (or error) is
    /// returned; a block that wants to stop early must check for itself.
    /// - Parameters:
    ///   - label: a name for the work, shown by the stall monitor if it stalls.
    ///   - body: the work.
    /// - Returns: the value `body` returns.
    /// - Throws: `.body` with what `body` throws; `.thread(.cancelledBeforeStart)` when
    ///   cancelled before it started; `.thread(.stopped)` after `stop()`.
    public func submit<T: Sendable, Failure: Error>(
        label: String? = nil, _ body: @escaping @Sendable () throws(Failure) -> T
    ) async throws(ThreadCallError<Failure>) -> T {
        let submitted = SubmittedBlock<T, Failure>()
        return try await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: SubmittedBlock<T, Failure>.Continuation) in
                guard submitted.keep(continuation) else {
                    continuation.resume(returning: .failure(.thread(.cancelledBeforeStart)))
                    return
                }
                do throws(PermanentThreadError) {
                    try execute(label: label) {
                        guard let continuation = submitted.start() else { return }
                        continuation.resume(returning: Result { () throws(ThreadCallError<Failure>) in try Self.run(body) })
                    }
                } catch {
                    submitted.refuse(error)
                }
            }
        } onCancel: {
            submitted.cancel()
        }.get()
    }
}
