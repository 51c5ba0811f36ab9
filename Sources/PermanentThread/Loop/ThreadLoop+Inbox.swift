import Glibc
import CPortKitSystem
import Synchronization

// The inbox and its wake handshake: work sent from any thread, the blocks it holds for
// their modes, and the one atomic state word (awake, asleep unwatched, asleep watching,
// wake claimed) that makes a burst of work cost at most one wake-up per sleep.
extension ThreadLoop {

    /// The values of `wakeState`. A producer that pushed, then finds the loop asleep, claims
    /// the single wake-up of that sleep by moving the state to `claimed`; only the loop's
    /// thread moves it back to `awake`.
    enum WakeState {
        /// Running, or about to sleep: a producer need not wake it.
        static let awake = 0
        /// Asleep (or about to be) in the poller's unwatched sleep (`PollerSleep.unwatched`).
        static let sleepingUnwatched = 1
        /// Asleep (or about to be) in the poller, watching descriptors.
        static let sleepingWatching = 2
        /// A waker has claimed this sleep's wake-up.
        static let claimed = 3
    }

    // MARK: Work from any thread

    /// Which modes a performed block may run in.
    enum BlockModes {
        case common
        case one(LoopMode)
        case many([LoopMode])

        init(_ modes: [LoopMode]) {
            // No `modes == [.common]`: that literal is an array allocated per block.
            if modes.count == 1 { self = modes[0] == .common ? .common : .one(modes[0]) }
            else { self = .many(modes) }
        }
    }

    enum Work {
        /// A block performed by a user in the common modes, without a label: what `execute`
        /// and `perform` send. Its own case so that copying or destroying one is a single
        /// retain or release, not the three of `blockIn`.
        case block(@Sendable () -> Void)
        /// A block performed by a user, in some modes, with an optional label.
        case blockIn(BlockModes, String?, @Sendable () -> Void)
        /// A change to the loop's state, carried out in whatever mode the loop runs.
        case command(@Sendable (ThreadLoop) -> Void)
        /// A job of an executor built on this loop, run in any common mode.
        case job(UnownedJob, JobTarget)
    }

    /// The executor a job is run on.
    package enum JobTarget {
        case serial(UnownedSerialExecutor)
        case task(UnownedTaskExecutor)
        /// Both: the job runs isolated to the serial executor with the task executor as its
        /// preference, so a task that prefers the thread hops back to it after an await.
        case isolated(UnownedSerialExecutor, UnownedTaskExecutor)
    }

    /// Runs an executor job on the calling thread, as `target` asks.
    package static func run(_ job: UnownedJob, on target: JobTarget) {
        switch target {
        case .serial(let executor): job.runSynchronously(on: executor)
        case .task(let executor): job.runSynchronously(on: executor)
        case .isolated(let serial, let task): job.runSynchronously(isolatedTo: serial, taskExecutor: task)
        }
    }

    /// Adds work to the inbox and wakes the loop if it sleeps (one wake-up per
    /// sleep at most; none when called on the loop's thread, which is not asleep).
    ///
    /// Lock-free: a producer preempted here holds up no other producer. `work` makes the item
    /// once its slot is reserved, and it is moved there rather than copied (a copy of a
    /// `Work` retains each payload, then releases it again).
    /// - Throws: `.loopEnded` once the inbox is closed; the work is then not kept.
    @inline(__always)
    func enqueue(closing: Bool = false, _ work: () -> Work) throws(ThreadLoopError) {
        guard inbox.push(closing: closing, work) else { throw .loopEnded }
        // The push's exchange was sequentially consistent: with this load, it is the Dekker
        // handshake with `waitForWork`, which publishes its sleep, then looks at the inbox.
        wakeIfAsleep()
    }

    /// Looks at the loop's sleep (sequentially consistent, after the caller's push or flag:
    /// the producer's half of the handshake in `waitForWork`) and wakes it if it sleeps.
    @inline(__always)
    func wakeIfAsleep() {
        let state = wakeState.load(ordering: .sequentiallyConsistent)
        if state == WakeState.sleepingUnwatched || state == WakeState.sleepingWatching { claimWake(state) }
    }

    /// Found the loop asleep (in `state`): claims the sleep's one wake-up and delivers it,
    /// unless another caller claimed it first or the loop woke meanwhile.
    private func claimWake(_ state: Int) {
        // Counted before the claim: once the loop has seen the claim (it is awake again),
        // its end waits for this delivery before it closes the poller.
        wakesInFlight.add(1, ordering: .sequentiallyConsistent)
        let (claimed, _) = wakeState.compareExchange(
            expected: state, desired: WakeState.claimed, ordering: .sequentiallyConsistent)
        if claimed {
            deliveries.add(1, ordering: .relaxed)
            poller.wakeUp(state == WakeState.sleepingUnwatched ? .unwatched : .watching)
        }
        wakesInFlight.subtract(1, ordering: .releasing)
    }


    /// Whether `work` may run in `mode`; `modeIsCommon` is `commonModes.contains(mode)`.
    func matches(_ work: Work, _ mode: LoopMode, modeIsCommon: Bool) -> Bool {
        switch work {
        case .command: return true
        case .job, .block: return modeIsCommon
        case .blockIn(let modes, _, _):
            switch modes {
            case .common: return modeIsCommon
            case .one(let one): return one == mode || (one == .common && modeIsCommon)
            case .many(let many):
                return many.contains(mode) || (many.contains(.common) && modeIsCommon)
            }
        }
    }

    /// Moves new work out of the inbox: changes are carried out at once, blocks are held.
    ///
    /// A change may run the loop (a source's cancel handler, say), whose drain takes the
    /// work after it: `pop` leaves the inbox settled before it returns an item.
    func drainInbox() {
        consumeWakeRequest()
        guard let first = inbox.pop() else { return }
        // An empty `held` takes the spare buffer's storage instead of growing anew.
        if held.isEmpty && held.capacity < spare.capacity { swap(&held, &spare) }
        var next: Work? = first
        while let work = next {
            if case .command(let change) = work { change(self) } else { held.append(work) }
            next = inbox.pop()
        }
    }

    /// A pass that takes the inbox's work answers a pending `wakeUp()`: the next sleep need
    /// not return at once for it. Loaded first, so the usual pass writes nothing shared.
    private func consumeWakeRequest() {
        if wakeRequested.load(ordering: .relaxed) { wakeRequested.store(false, ordering: .relaxed) }
    }

    /// Keeps an emptied buffer as `spare` for the next drain, if it is the larger one.
    private func recycle(_ buffer: inout [Work]) {
        guard buffer.isEmpty, spare.capacity < buffer.capacity else { return }
        swap(&spare, &buffer)
    }

    /// Runs the held blocks that may run in `mode`, in order, then the work that came since,
    /// straight from the inbox; keeps the blocks that may not run in `mode`.
    func runBlocks(_ mode: LoopMode) {
        if !held.isEmpty { runHeld(mode) }
        runIncoming(mode)
    }

    /// Runs the held blocks that may run in `mode`, in order; keeps the others.
    private func runHeld(_ mode: LoopMode) {
        var batch: [Work] = []
        swap(&batch, &held)
        var version = commonModesVersion
        var modeIsCommon = isCommon(mode)
        var kept: [Work] = []
        for index in batch.indices {
            // A block may have made a mode common.
            if version != commonModesVersion {
                version = commonModesVersion
                modeIsCommon = isCommon(mode)
            }
            guard matches(batch[index], mode, modeIsCommon: modeIsCommon) else { kept.append(batch[index]); continue }
            execute(batch[index])
        }
        // Blocks held by a nested run came after `kept`; keep the order.
        if !kept.isEmpty { held = kept + held }
        batch.removeAll(keepingCapacity: true)
        recycle(&batch)
    }

    /// Takes the work that is in the inbox now (not what comes meanwhile, which waits for
    /// the next pass) and runs it in order: changes, and the blocks that may run in `mode`;
    /// the other blocks are held, after those held already.
    ///
    /// Nothing held can come before what this runs: a nested run (in a block or a change)
    /// drains the whole inbox, so after one this finds nothing more to take.
    private func runIncoming(_ mode: LoopMode) {
        consumeWakeRequest()
        let end = inbox.tailPosition
        var version = commonModesVersion
        var modeIsCommon = isCommon(mode)
        // A new binding per item (no `var` reassigned): each item is moved, never copied.
        while let work = inbox.pop(before: end) {
            // A block may have made a mode common.
            if version != commonModesVersion {
                version = commonModesVersion
                modeIsCommon = isCommon(mode)
            }
            if matches(work, mode, modeIsCommon: modeIsCommon) { execute(work) } else { held.append(work) }
        }
    }

    /// Runs one block, job or change.
    @inline(__always)
    func execute(_ work: Work) {
        switch work {
        case .block(let body):
            body()
        case .blockIn(_, let label, let body):
            if let label {
                runningLabel.withLock { $0 = label }
                body()
                runningLabel.withLock { $0 = nil }
            } else {
                body()
            }
        case .job(let job, let target):
            Self.run(job, on: target)
        case .command(let change):
            change(self)
        }
    }

    /// Told by `LoopSource.signal()`, from any thread, by the caller that set the source's
    /// flag: queue it for a pass and wake the loop if it sleeps, as `enqueue` does for work.
    func sourceSignalled(_ source: LoopSource) {
        // A loop that ended takes no more signals.
        guard signalled.queue.push({ source }) else { return }
        wakeIfAsleep()
    }

    /// Makes the loop spin for up to `window` before each unwatched sleep: set by a
    /// permanent thread on its own loop (see `PermanentThread.spinBeforeSleep`).
    package func spinBeforeSleep(_ window: Duration) {
        precondition(isCurrent, "a loop's spin is set on its own thread")
        let (seconds, attoseconds) = max(window, .zero).components
        spinWindow = Int(min(seconds, 1_000)) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    }

    /// Spins, with the loop awake (so producers make no wake-up call), until work comes or
    /// `limit` (the sleep's time-out, `nil` for none) or the spin window has passed; says
    /// whether work came. Yields now and then, in case a producer waits for this CPU.
    private func spinForWork(limit: Duration?) -> Bool {
        var window = spinWindow
        if let limit {
            let (seconds, attoseconds) = max(limit, .zero).components
            if seconds < 1_000 { window = min(window, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)) }
        }
        guard window > 0 else { return false }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let end = now.tv_sec * 1_000_000_000 + now.tv_nsec + window
        var spins = 0
        while true {
            if inbox.hasWaiting || signalled.hasQueued || wakeRequested.load(ordering: .relaxed)
                || stopRequested.load(ordering: .relaxed) {
                return true
            }
            portkit_cpu_relax()
            spins &+= 1
            if spins & 63 == 0 {
                clock_gettime(CLOCK_MONOTONIC, &now)
                if now.tv_sec * 1_000_000_000 + now.tv_nsec >= end { return false }
                sched_yield()
            }
        }
    }

    /// How many signalled-source entries passes have looked at: tests prove a pass visits
    /// the sources that were signalled, not every source of its mode.
    package var signalledSourceVisits: Int { signalled.visits }

    /// Sleeps (or polls); returns the ready descriptor events.
    ///
    /// The poller chooses how the sleep is taken (see `Poller`): the loop says only how
    /// long it may last, publishes the sleep the poller prepared, and takes it back if work
    /// came meanwhile.
    /// - Throws: `.system` when the poller's wait fails, which only a broken poller does
    ///   (its descriptor closed under it): the loop records the failure and closes its
    ///   inbox rather than spin on a wait that fails at once.
    func waitForWork(timeout: Duration?) throws(ThreadLoopError) -> [PollEvent] {
        if let failure { throw failure }
        var timeout = timeout
        var sleeping = false
        if timeout != .zero {
            // Armed before the loop says it sleeps, so a wake-up from then on is not lost.
            let sleep = poller.prepareToSleep()
            if sleep == .unwatched && spinWindow > 0 && spinForWork(limit: timeout) { timeout = .zero }
            if timeout != .zero {
                // Dekker with the producers (all sequentially consistent): the loop publishes
                // its sleep, then looks at the inbox; a producer pushes, then looks at the
                // sleep. One of the two sees the other, so no work is left unwoken.
                let asleep = sleep == .unwatched ? WakeState.sleepingUnwatched : WakeState.sleepingWatching
                wakeState.store(asleep, ordering: .sequentiallyConsistent)
                sleeping = true
                if inbox.hasWaiting || signalled.hasQueued || wakeRequested.load(ordering: .sequentiallyConsistent) {
                    // Work came first: take the sleep back and only poll. If a waker claimed
                    // the sleep meanwhile, its wake-up is not waited for (its thread may have
                    // been preempted before delivering it): it lands later, as one early
                    // return of a later sleep, still counted against this one.
                    let (withdrawn, _) = wakeState.compareExchange(
                        expected: asleep, desired: WakeState.awake, ordering: .sequentiallyConsistent)
                    if withdrawn { sleeping = false }
                    timeout = .zero
                }
                if sleeping && timeout != .zero {
                    // Going to sleep: give back what the last burst grew.
                    if spare.capacity > Self.idleCapacityLimit { spare = [] }
                    if held.isEmpty && held.capacity > Self.idleCapacityLimit { held = [] }
                }
            }
        }
        if stopRequested.load(ordering: .acquiring) { timeout = .zero }
        var ready: [PollEvent] = []
        swap(&ready, &readyBuffer)
        do {
            _ = try poller.wait(timeout: timeout) { ready.append($0) }
        } catch {
            wakeState.store(WakeState.awake, ordering: .sequentiallyConsistent)
            inbox.close()
            let failure = ThreadLoopError("poller wait", error)
            self.failure = failure
            throw failure
        }
        // Only a sleep can have been claimed by a waker; a poll leaves the flags alone
        // (`wakeRequested` is cleared by the next drain). A wake-up claimed but not yet
        // delivered lands later, as one early return of a later sleep or poll; it was
        // counted for the sleep that was claimed, so deliveries stay at most one per sleep.
        if sleeping {
            wakeState.store(WakeState.awake, ordering: .sequentiallyConsistent)
            wakeRequested.store(false, ordering: .relaxed)
        }
        return ready
    }
}
