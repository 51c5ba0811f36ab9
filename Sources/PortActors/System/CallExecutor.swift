import PermanentThread

/// A permanent thread as the task executor the calls a system serves prefer: their
/// nonisolated steps (decoding the arguments, the distributed runtime, the reply) run on
/// the thread's loop, never on the shared pool.
///
/// Not the thread's own `asUnownedTaskExecutor()`: the thread runs every job it is given
/// isolated to itself as a serial executor, so a task preferring it would be sent back to
/// the loop at each `await` of its nonisolated code (about seven loop jobs per call). A
/// job given here runs as a task executor's job only: the runtime then enqueues one only
/// when the call hops onto its actor and back off it.
final class CallExecutor: TaskExecutor {
    let thread: PermanentThread

    init(thread: PermanentThread) {
        self.thread = thread
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if let loop = thread.loop {
            do {
                return try loop.enqueue(job: job, on: .task(asUnownedTaskExecutor()))
            } catch {
                // The loop has ended: the thread runs the job as it runs any late one.
            }
        }
        thread.enqueue(ExecutorJob(job))
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }
}
