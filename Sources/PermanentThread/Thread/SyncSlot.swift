import PortKitSystem
import Glibc
import PortKitLocks

/// What a calling thread reuses for its `PermanentThread.sync` calls: the block the loop
/// runs (made once), the caller's job (a closure whose context is on the caller's stack) and
/// the word the caller waits on. A call allocates only the escaping thunk that
/// `withoutActuallyEscaping` makes for the job.
///
/// The wait: the caller spins on the word for a while (yielding its CPU), then sleeps on it
/// (a `DoneWord`: the permanent thread marks it done, and makes the system call to wake the
/// caller only if the caller said it sleeps). How long the caller spins adapts to how long its last calls took:
/// twice that, at most `maxSpin`; a call that took longer halves it. Nothing spins on a
/// machine where the caller could only take the CPU from the thread it waits for.
// Safety of @unchecked Sendable: `job` is written by the caller before the block is enqueued
// (the inbox's release and acquire publish it), then read and cleared by the permanent
// thread before it marks the word done (releasing), which the caller loads (acquiring)
// before it writes `job` again. `spinBudget`, `busy` and `runner` are the calling thread's
// alone; the word is a `DoneWord`.
final class SyncSlot: @unchecked Sendable {
    private var job: (() -> Void)?
    private let word = DoneWord(done: true)
    /// What the loop runs for every call of this slot; it holds the slot (see `slotKey`).
    private(set) var runner: @Sendable () -> Void = {}
    /// A call of this slot is in progress (a nested call on this thread takes a fresh slot).
    private var busy = false
    /// How long the next call spins before it sleeps, in nanoseconds.
    private var spinBudget = SyncSlot.maxSpin
    /// How many calls this slot carried, for tests: a thread's calls share one slot.
    private(set) var calls = 0

    /// The longest a caller spins: a few wake-ups of a sleeping thread.
    private static let maxSpin = 30_000
    /// Whether spinning can help: another CPU may run the permanent thread meanwhile. Asked
    /// per slot, as the calling thread may be pinned.
    private let canSpin = ThreadIdentity.allowedCPUCount > 1

    private init() {}

    deinit { word.deallocate() }

    /// Runs `job` on `loop` with the calling thread's slot and waits until it has run.
    /// - Throws: `.loopEnded` when the loop takes no more work (`job` does not run).
    static func call(on loop: ThreadLoop, label: String?, _ job: () -> Void) throws(ThreadLoopError) {
        let slot = forCurrentThread()
        guard slot.busy else { return try slot.perform(on: loop, label: label, job) }
        // Only a call made while this thread's own call waits (from a signal handler) gets here.
        let fresh = made()
        defer { fresh.release() }
        try fresh.perform(on: loop, label: label, job)
    }

    private func perform(on loop: ThreadLoop, label: String?, _ job: () -> Void) throws(ThreadLoopError) {
        busy = true
        calls &+= 1
        defer { busy = false }
        try withoutActuallyEscaping(job) { (escapable) throws(ThreadLoopError) in
            self.job = escapable
            word.reset()
            do throws(ThreadLoopError) {
                try loop.performInCommonModes(label: label, runner)
            } catch {
                self.job = nil
                word.markDone()
                throw error
            }
            waitUntilDone()
        }
    }

    /// On the permanent thread.
    private func run() {
        runJob()
        word.markDone()
    }

    /// Runs the job and lets go of it before the caller learns it is done:
    /// `withoutActuallyEscaping` checks that nothing kept it.
    @inline(never)
    private func runJob() {
        let job = self.job
        self.job = nil
        job?()
    }

    private func waitUntilDone() {
        let start = Self.nanoseconds()
        if spin(from: start) { return }
        _ = word.wait(timeout: nil)
        adapt(took: Self.nanoseconds() - start)
    }

    /// Spins until the call is done or the budget is spent; says whether it is done.
    ///
    /// Each turn yields the CPU: the kernel often wakes the permanent thread on the caller's
    /// own CPU (the waker looks about to sleep), and a caller spinning there would keep it
    /// from running until the budget is spent. With nothing else to run, a yield returns at once.
    private func spin(from start: Int) -> Bool {
        guard canSpin else { return false }
        var spins = 0
        while true {
            if word.isDone {
                adapt(took: Self.nanoseconds() - start)
                return true
            }
            sched_yield()
            spins &+= 1
            if spins & 7 == 0 && Self.nanoseconds() - start > spinBudget { return false }
        }
    }

    /// The next spin: twice what this call took, if that is within `maxSpin`, else half the last.
    private func adapt(took: Int) {
        spinBudget = took <= Self.maxSpin / 2 ? max(took * 2, 1_000) : max(spinBudget / 2, 1_000)
    }

    private static func nanoseconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now.tv_sec * 1_000_000_000 + now.tv_nsec
    }

    /// A new slot whose `runner` holds it: the cycle is broken when its thread ends, and a
    /// block still queued or running keeps the slot until it is released.
    private static func made() -> SyncSlot {
        let slot = SyncSlot()
        slot.runner = { slot.run() }
        return slot
    }

    /// The calling thread's slot, made on first use.
    static func forCurrentThread() -> SyncSlot {
        if let raw = pthread_getspecific(slotKey) {
            return Unmanaged<SyncSlot>.fromOpaque(raw).takeUnretainedValue()
        }
        let slot = made()
        pthread_setspecific(slotKey, Unmanaged.passRetained(slot).toOpaque())
        return slot
    }

    /// Breaks the slot's cycle; on its own thread, as that thread ends.
    fileprivate func release() { runner = {} }
}

/// The thread-local slot of `sync` callers; its destructor lets the slot go as the thread ends.
private let slotKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        guard let raw else { return }
        let slot = Unmanaged<SyncSlot>.fromOpaque(raw).takeRetainedValue()
        slot.release()
    }
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()
