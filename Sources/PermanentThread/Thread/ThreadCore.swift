import Glibc
import CPortKitSystem
import Synchronization
import PortKitSystem
import PortKitLocks

/// The part of a permanent thread that the thread itself holds.
///
/// The thread's body retains this object, never the `PermanentThread` a user holds, so
/// dropping the last user reference runs `PermanentThread.deinit`, which stops the
/// thread. (The seeds' pitfall: `NSThread initWithTarget:self` makes the thread, and its
/// never-ending run loop, keep its owner alive for ever.)
///
/// Lifecycle, one way only:
///
///     idle ──run()──▶ starting ──loop made──▶ running ──stop()──▶ stopping ──joined──▶ stopped
///       │                 │ (loop could not be made: back to idle, run() throws)
///       └──stop(), nothing queued──────────────────────────────────────────────────▶ stopped
///
/// A loop whose poller fails (`ThreadLoop.failure`) takes the thread from running to
/// stopping on its own: the blocks it accepted run, the thread exits, and the work offered
/// later is refused with `.loop` and that failure rather than `.stopped`.
///
/// `stopping` posts one exit marker with `performFinal`, which closes the loop's inbox in
/// the same step: every block accepted before it runs, every later one is refused.
// Safety of @unchecked Sendable: the mutable state shared between threads is `state`,
// behind its lock; `exitRequested` and `keepAlive` are touched only on the permanent
// thread itself; `publishedLoop` and `kernelID` are atomics; the rest are `let`s.
final class ThreadCore: @unchecked Sendable {

    enum Lifecycle {
        /// Not started; work offered now waits in `State.pending`.
        case idle
        /// `pthread_create` succeeded; the thread is making its loop.
        case starting(pthread_t)
        /// The loop runs and takes work.
        case running(pthread_t)
        /// The exit marker is queued; `joining` is true once a thread is in `pthread_join`.
        case stopping(pthread_t, joining: Bool)
        /// The thread has exited and was joined (or detached, when its last owner let go of
        /// it on the thread itself).
        case stopped

        /// Which case, for waiting until it changes.
        var phase: Int {
            switch self {
            case .idle: 0
            case .starting: 1
            case .running: 2
            case .stopping(_, let joining): joining ? 4 : 3
            case .stopped: 5
            }
        }
    }

    /// Work offered before the loop exists.
    enum PendingWork {
        case block(String?, @Sendable () -> Void)
        case job(UnownedJob, ThreadLoop.JobTarget)
    }

    struct State {
        var lifecycle: Lifecycle = .idle
        var pending: [PendingWork] = []
        var handover = Handover()
        var startAttempt = 0
        var startFailure: (attempt: Int, error: PermanentThreadError)?
        /// Why the loop stopped taking work on its own (its poller failed), if it did.
        var loopFailure: ThreadLoopError?

        /// What refused work is told: the loop's failure if it failed, else `.stopped`.
        var refusal: PermanentThreadError { loopFailure.map(PermanentThreadError.loop) ?? .stopped }
        /// Keeps the loop alive as long as the core; `publishedLoop` points at it.
        var loop: ThreadLoop?
    }

    let name: String
    let stackSize: Int?
    /// The lifecycle, pending work and hand-over, behind one lock.
    let state = ConditionLock(State())

    /// The loop, once made; read without a lock on the hot path.
    let publishedLoop = Atomic<Unmanaged<ThreadLoop>?>(nil)
    /// The thread's kernel id (what `/proc/self/task` lists), or 0 before it starts.
    let kernelID = Atomic<Int32>(0)

    private var exitRequested = false
    private var keepAlive: LoopSource?

    /// `perform` takes an array of modes; one shared array spares an allocation per block.
    static let commonModes: [LoopMode] = [.common]

    /// How long the loop spins before it sleeps (see `PermanentThread.spinBeforeSleep`).
    let spinBeforeSleep: Duration

    init(name: String, stackSize: Int?, spinBeforeSleep: Duration = .zero) {
        self.name = name
        self.stackSize = stackSize
        self.spinBeforeSleep = spinBeforeSleep
    }

    var loop: ThreadLoop? { publishedLoop.load(ordering: .acquiring)?.takeUnretainedValue() }

    /// Whether the calling thread is the permanent thread.
    var isCurrent: Bool { loop?.isCurrent ?? false }

    /// Whether code on the calling thread is serialised with this thread's jobs: it is the
    /// permanent thread, or the thread that drains jobs handed over after it ended.
    var isolatesCurrentThread: Bool {
        if isCurrent { return true }
        let me = ThreadIdentity.kernelID
        return state.withLock { $0.handover.drainer == me }
    }

    /// Whether a `stop()` has been made (the inbox is closed or about to be).
    var isStopRequested: Bool { state.withLock { $0.lifecycle.phase >= 3 } }

    /// What refused work is told (`State.refusal`).
    var refusal: PermanentThreadError { state.withLock { $0.refusal } }

    /// Waits until the lifecycle leaves `phase`.
    private func waitForChange(from phase: Int) {
        _ = state.wait(until: nil) { $0.lifecycle.phase == phase ? nil : () }
    }

    func setLifecycle(_ lifecycle: Lifecycle, _ state: inout State) {
        state.lifecycle = lifecycle
        // Safe from inside `withLock`: the waiters re-check once the lock is released.
        self.state.broadcast()
    }

    // MARK: Starting

    func start() throws(PermanentThreadError) {
        // The start attempt this caller made or waited for; its failure is this caller's.
        var attempt: Int?
        while true {
            let waitFor = try state.withLock { (s) throws(PermanentThreadError) -> Int? in
                switch s.lifecycle {
                case .idle:
                    if let attempt, let failure = s.startFailure, failure.attempt == attempt { throw failure.error }
                    let thread = try createThread()
                    s.startAttempt += 1
                    attempt = s.startAttempt
                    setLifecycle(.starting(thread), &s)
                    return s.lifecycle.phase
                case .starting:
                    attempt = s.startAttempt
                    return s.lifecycle.phase
                case .running:
                    return nil
                case .stopping, .stopped:
                    throw .stopped
                }
            }
            guard let waitFor else { return }
            waitForChange(from: waitFor)
        }
    }

    private func createThread() throws(PermanentThreadError) -> pthread_t {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if let stackSize {
            let status = pthread_attr_setstacksize(&attributes, stackSize)
            if status != 0 { throw .system(SystemCallError(operation: "pthread_create", errno: status)) }
        }
        var thread = pthread_t()
        // The thread owns one reference to the core (not to the PermanentThread).
        let context = Unmanaged.passRetained(self).toOpaque()
        let status = pthread_create(&thread, &attributes, { raw in
            let core = Unmanaged<ThreadCore>.fromOpaque(raw!).takeRetainedValue()
            core.threadMain()
            return nil
        }, context)
        if status != 0 {
            Unmanaged<ThreadCore>.fromOpaque(context).release()
            throw .system(SystemCallError(operation: "pthread_create", errno: status))
        }
        return thread
    }

    /// The body of the permanent thread.
    private func threadMain() {
        ThreadIdentity.setName(name)
        // A thread inherits its creator's signal mask, and Swift's cooperative pool blocks
        // nearly every signal; let through the one the stall monitor samples stacks with.
        SignalMask.unblock([StackSampler.signal])
        let loop: ThreadLoop
        do {
            loop = try ThreadLoop.forCurrentThread()
        } catch {
            state.withLock { s in
                s.startFailure = (s.startAttempt, .loop(error))
                setLifecycle(.idle, &s)
            }
            pthread_detach(pthread_self())
            return
        }
        // The loop is kept alive by this source, which nothing signals until the thread
        // ends: the thread sleeps in the kernel, with no polling and no periodic timer.
        let source = LoopSource(order: .min) { [unowned self] in self.keepAlivePerformed() }
        keepAlive = source
        do {
            try loop.add(source, forMode: .common)
        } catch {
            preconditionFailure("a new run loop refused its keep-alive source: \(error)")
        }
        loop.spinBeforeSleep(spinBeforeSleep)
        kernelID.store(ThreadIdentity.kernelID, ordering: .releasing)
        state.withLock { s in
            s.loop = loop
            for work in s.pending { Self.hand(work, to: loop) }
            s.pending = []
            publishedLoop.store(.passUnretained(loop), ordering: .releasing)
            if case .starting(let thread) = s.lifecycle { setLifecycle(.running(thread), &s) }
        }
        while !exitRequested {
            // `.stopped` from a user's `loop.stop()` or `.finished` cannot end a permanent
            // thread: only the exit marker sets `exitRequested`, or a failed loop.
            do {
                _ = try loop.run(mode: .default, until: nil)
            } catch {
                loopFailed(error, loop)
                break
            }
        }
        keepAlive = nil
        handOverJobs()
        // Returning runs the loop's thread-exit destructor, which closes its descriptors.
    }

    /// The loop can no longer wait (its inbox is closed): the thread stops on its own,
    /// after the work the loop accepted has run.
    private func loopFailed(_ failure: ThreadLoopError, _ loop: ThreadLoop) {
        state.withLock { s in
            s.loopFailure = failure
            if case .running(let thread) = s.lifecycle { setLifecycle(.stopping(thread, joining: false), &s) }
        }
        loop.runAcceptedBlocks()
    }

    private static func hand(_ work: PendingWork, to loop: ThreadLoop) {
        do {
            switch work {
            case .block(let label, let body):
                try loop.perform(inModes: commonModes, label: label, body)
            case .job(let job, let executor):
                try loop.enqueue(job: job, on: executor)
            }
        } catch {
            preconditionFailure("a new run loop refused work: \(error)")
        }
    }

    // MARK: Stopping

    /// Runs on the permanent thread as the last block it accepted.
    private func exitMarkerRan() {
        exitRequested = true
        requestRunsToEnd()
    }

    /// Ends the innermost run, and makes the keep-alive source end the run around it too,
    /// in case the marker ran inside a nested run of the default mode.
    private func requestRunsToEnd() {
        loop?.stop()
        keepAlive?.signal()
    }

    private func keepAlivePerformed() {
        if exitRequested { requestRunsToEnd() }
    }

    private enum StopStep {
        case done, again, start, join(pthread_t), wait(phase: Int)
    }

    /// Stops the thread: see `PermanentThread.stop()`. From the thread itself it cannot wait
    /// for the exit; from a deinit on the thread itself it detaches the thread.
    func stop(fromDeinit: Bool) {
        while true {
            let step = state.withLock { s -> StopStep in
                switch s.lifecycle {
                case .idle:
                    if !s.pending.isEmpty { return .start }
                    s.handover.threadEnded = true
                    setLifecycle(.stopped, &s)
                    return .done
                case .starting:
                    return .wait(phase: s.lifecycle.phase)
                case .running(let thread):
                    postExitMarker(on: s.loop)
                    setLifecycle(.stopping(thread, joining: false), &s)
                    return .again
                case .stopping(let thread, let joining):
                    if pthread_equal(thread, pthread_self()) != 0 {
                        if fromDeinit && !joining {
                            // Nobody is left to join it; it exits once its queued blocks ran.
                            pthread_detach(thread)
                            setLifecycle(.stopped, &s)
                        }
                        return .done
                    }
                    if joining { return .wait(phase: s.lifecycle.phase) }
                    setLifecycle(.stopping(thread, joining: true), &s)
                    return .join(thread)
                case .stopped:
                    return .done
                }
            }
            switch step {
            case .done:
                return
            case .again:
                continue
            case .wait(let phase):
                waitForChange(from: phase)
            case .join(let thread):
                pthread_join(thread, nil)
                state.withLock { setLifecycle(.stopped, &$0) }
                return
            case .start:
                // Work was accepted before the thread ever ran: start it so that work runs.
                do {
                    try start()
                } catch {
                    if runPendingHereIfStillIdle() { return }
                }
            }
        }
    }

    /// Queues the exit marker and closes the inbox in one step. Lock held.
    private func postExitMarker(on loop: ThreadLoop?) {
        guard let loop else { return }
        do {
            try loop.performFinal(label: nil) { [self] in exitMarkerRan() }
        } catch {
            // Closed already: only the loop's own teardown closes it, after the marker ran.
        }
    }

    // MARK: Work

    /// `execute` when the loop is not published yet (or was published meanwhile).
    func executeSlowly(label: String?, _ block: @escaping @Sendable () -> Void) throws(PermanentThreadError) {
        try state.withLock { (s) throws(PermanentThreadError) in
            if let loop = s.loop {
                do {
                    try loop.perform(inModes: Self.commonModes, label: label, block)
                } catch {
                    throw s.refusal
                }
                return
            }
            switch s.lifecycle {
            case .idle, .starting: s.pending.append(.block(label, block))
            case .running, .stopping, .stopped: throw s.refusal
            }
        }
    }
}
