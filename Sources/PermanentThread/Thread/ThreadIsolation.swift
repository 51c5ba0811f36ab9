/// A permanent thread as the serial executor of the actors that run on it: what
/// `PermanentThread.asUnownedSerialExecutor()` names.
///
/// It is a companion object rather than the thread itself because the runtime hands a job
/// to one `enqueue` for both of the thread's roles, with nothing to say which: a job of an
/// actor isolated to the thread, and a job of a task that only prefers the thread. Run
/// isolated to the thread, the second kind made the runtime send the task back to the
/// loop at every `await` of its nonisolated code (each entry to a nonisolated function is
/// a switch away from the thread's isolation), several loop passes per awaited call. So
/// the actors' jobs come here and run isolated to this executor, with the thread as their
/// task executor; the thread's own `enqueue` (a task's preference) runs its jobs with no
/// isolation, and a task that prefers the thread stays on it from one `await` to the next
/// without a loop pass.
///
/// The thread keeps it; it keeps the thread's core, never the thread (an actor keeps the
/// thread, hence this, alive).
// Safety of @unchecked Sendable: `preference` is written once, by `PermanentThread.init`,
// before the thread object (the only way to reach this one) is visible to any other
// thread; afterwards it is only read. `core` is Sendable.
final class ThreadIsolation: SerialExecutor, @unchecked Sendable {
    let core: ThreadCore
    /// The thread as a task executor (unowned: the thread keeps this object, not the reverse).
    private(set) nonisolated(unsafe) var preference: UnownedTaskExecutor?

    init(core: ThreadCore) {
        self.core = core
    }

    /// Called once by the thread's initializer.
    func attach(_ thread: PermanentThread) {
        preference = thread.asUnownedTaskExecutor()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        core.enqueue(UnownedJob(job), executor: .isolated(asUnownedSerialExecutor(), preference!))
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func checkIsolated() {
        precondition(core.isolatesCurrentThread, "not on permanent thread '\(core.name)'")
    }

    func isIsolatingCurrentContext() -> Bool? {
        core.isolatesCurrentThread
    }
}
