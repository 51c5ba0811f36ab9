import CPortKitSystem
import PortKitSystem

// The hand-over: executor jobs that reach a permanent thread after its loop closed run
// anyway, in order, one at a time, and work accepted before a start that failed runs on
// the caller: nothing offered to the thread is lost.
extension ThreadCore {
    /// Executor jobs that arrive after the loop closed. A job cannot be failed (the task it
    /// belongs to would hang) or dropped, so they run in order, one at a time: first on the
    /// permanent thread after its loop ended, then on whichever caller finds nobody
    /// draining them. See `PermanentThread.enqueue(_:)`.
    struct Handover {
        var threadEnded = false
        var jobs: [(UnownedJob, ThreadLoop.JobTarget)] = []
        /// The kernel id of the thread draining `jobs`, or 0.
        var drainer: Int32 = 0
    }

    /// The thread could not be started when stop() needed it: rather than drop the work
    /// accepted before, run it on the calling thread. False if the state moved on meanwhile.
    func runPendingHereIfStillIdle() -> Bool {
        let me = ThreadIdentity.kernelID
        let work = state.withLock { s -> [PendingWork]? in
            guard case .idle = s.lifecycle else { return nil }
            let work = s.pending
            s.pending = []
            s.handover.threadEnded = true
            s.handover.drainer = me
            setLifecycle(.stopped, &s)
            return work
        }
        guard let work else { return false }
        for item in work {
            switch item {
            case .block(_, let body): body()
            case .job(let job, let executor): ThreadLoop.run(job, on: executor)
            }
        }
        drainHandover()
        return true
    }

    /// Enqueues an executor job: on the loop while it takes work, else queued for the
    /// thread's start, else handed over (see `Handover`).
    func enqueue(_ job: UnownedJob, executor: ThreadLoop.JobTarget) {
        if let loop {
            do {
                try loop.enqueue(job: job, on: executor)
                return
            } catch {
                // Closed: hand it over below.
            }
        }
        let me = ThreadIdentity.kernelID
        let mustDrain = state.withLock { s -> Bool in
            if s.loop == nil && !s.handover.threadEnded {
                s.pending.append(.job(job, executor))
                return false
            }
            if let loop = s.loop {
                do {
                    try loop.enqueue(job: job, on: executor)
                    return false
                } catch {
                    // Closed.
                }
            }
            s.handover.jobs.append((job, executor))
            guard s.handover.threadEnded && s.handover.drainer == 0 else { return false }
            s.handover.drainer = me
            return true
        }
        if mustDrain { drainHandover() }
    }

    /// On the permanent thread, after its loop ended: run the jobs refused by the closed
    /// loop, and from then on let callers run them.
    func handOverJobs() {
        let me = ThreadIdentity.kernelID
        let mustDrain = state.withLock { s -> Bool in
            s.handover.threadEnded = true
            guard !s.handover.jobs.isEmpty, s.handover.drainer == 0 else { return false }
            s.handover.drainer = me
            return true
        }
        if mustDrain { drainHandover() }
    }

    /// Runs handed-over jobs one at a time, in order, until none is left; the caller is
    /// the drainer.
    private func drainHandover() {
        while true {
            let next = state.withLock { s -> (UnownedJob, ThreadLoop.JobTarget)? in
                if s.handover.jobs.isEmpty {
                    s.handover.drainer = 0
                    return nil
                }
                return s.handover.jobs.removeFirst()
            }
            guard let (job, executor) = next else { return }
            ThreadLoop.run(job, on: executor)
        }
    }
}
