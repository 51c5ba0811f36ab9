extension PermanentThread: SerialExecutor, TaskExecutor {
    /// Runs an executor job on the thread: the job itself is queued on the run loop (no
    /// closure is allocated per job) and runs in order with executed blocks.
    ///
    /// Jobs that come here are a task's that prefers the thread
    /// (`Task(executorPreference:)`, `withTaskExecutorPreference`): they run with no actor
    /// isolation, so the task's nonisolated code stays on the thread from one `await` to
    /// the next. An actor's jobs go to the executor `asUnownedSerialExecutor()` names, and
    /// run isolated to it, on this same loop and in the same order.
    ///
    /// A job cannot be refused: failing it would leave its task suspended for ever. Jobs
    /// that arrive before `run()` wait for the thread to start. Jobs that arrive after
    /// `stop()` closed the loop still run, in order and one at a time: first on the
    /// permanent thread once its loop has ended, then, after the thread has exited, on the
    /// thread that enqueues one while no other is draining them (it runs the ones queued
    /// meanwhile too). So an actor outliving its stopped thread keeps working, serially,
    /// on its callers' threads, and `checkIsolated()` accepts the thread running them.
    public func enqueue(_ job: consuming ExecutorJob) {
        core.enqueue(UnownedJob(job), executor: .task(asUnownedTaskExecutor()))
    }

    /// This thread as the serial executor of an actor:
    /// `nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }`.
    ///
    /// It names a companion executor the thread keeps, which runs the actor's jobs on this
    /// loop isolated to the actor, as the runtime requires; the thread's own `enqueue` is
    /// for the jobs of tasks that prefer it.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        isolation.asUnownedSerialExecutor()
    }

    /// This thread as a task executor (`Task(executorPreference:)`, `withTaskExecutorPreference`).
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    /// Traps unless called on this thread (or on the thread draining its jobs after it
    /// stopped): used by `assumeIsolated` and `#isolation` checks when the runtime cannot
    /// tell on its own, e.g. inside a block passed to `execute`.
    public func checkIsolated() {
        precondition(core.isolatesCurrentThread, "not on permanent thread '\(name)'")
    }

    /// Whether the calling thread is this thread (or the one draining its jobs after it
    /// stopped); the non-trapping form of `checkIsolated()`.
    public func isIsolatingCurrentContext() -> Bool? {
        core.isolatesCurrentThread
    }
}
