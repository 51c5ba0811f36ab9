import Glibc
import CPortKitSystem
import Synchronization
import PortKitSystem
import PortKitLocks

/// A run loop: the event engine of one thread, with CoreFoundation's semantics.
///
/// Every thread has at most one, made the first time the thread asks for
/// `ThreadLoop.current` and torn down (descriptors closed, sources cancelled) when the
/// thread ends; `ThreadLoop.main` is the main thread's. A loop sleeps in the kernel, in
/// its platform's poller, until a timer is due, a watched descriptor is ready, a custom
/// source is signalled, a block is performed, or it is woken.
///
/// Any thread may add and remove timers, observers and sources, perform blocks, stop
/// or wake a loop: changes made from another thread are carried out on the loop's thread
/// on its next pass. Running the loop is for its own thread only.
///
/// The loop's code is split by concept: this file holds its state and public API; the
/// pass is in `ThreadLoop+Pass.swift`, the inbox and wake handshake in
/// `ThreadLoop+Inbox.swift`, the mode table in `ThreadLoop+Modes.swift`, the per-thread
/// registry in `ThreadLoop+Registry.swift`.
// Safety of @unchecked Sendable: the state below "Loop thread only" is read and written
// only on the loop's own thread (every public entry point checks `isCurrent` and sends
// work through `inbox` otherwise); the state shared with other threads is `inbox` and
// `signalled.queue` (queues for many producers and this one consumer, see `WorkQueue`),
// the `wakeState`, `wakeRequested`, `stopRequested`, `wakesInFlight` and `deliveries`
// atomics, the poller's `wakeUp` and `register` (safe from any thread, see `Poller`), the
// `runningLabel` lock and immutable lets.
public final class ThreadLoop: @unchecked Sendable {

    // MARK: Shared with other threads

    /// The readiness backend the loop sleeps in; its concrete type, so calls are direct.
    let poller: PlatformPoller
    /// Work sent to the loop, in order: blocks, jobs and changes (commands) alike.
    let inbox = WorkQueue<Work>()
    /// The loop's sleep, as the wake handshake sees it: one of the `WakeState` values.
    let wakeState = Atomic<Int>(WakeState.awake)
    /// Set by `wakeUp()`: the next sleep must return at once. Cleared by drains and sleeps.
    let wakeRequested = Atomic<Bool>(false)
    /// Set by `stop()`: the innermost run returns `.stopped`.
    let stopRequested = Atomic<Bool>(false)
    /// Wake-ups claimed but maybe not yet delivered: the poller is closed only once none is
    /// in flight. Counted before the claim, so the loop's end cannot miss one.
    let wakesInFlight = Atomic<Int>(0)
    /// How many wake-ups were delivered to the poller: tests prove wakes are coalesced.
    package var wakeDeliveries: Int { deliveries.load(ordering: .relaxed) }
    /// The count behind `wakeDeliveries`.
    let deliveries = Atomic<Int>(0)
    /// The optional label of the block being run, for the stall monitor.
    package let runningLabel = Locked<String?>(nil)
    /// The name given to the loop, shown in reports.
    public let name: String

    // MARK: Loop thread only

    // `@exclusivity(unchecked)`: these are touched by the loop's thread alone, and no access
    // to one of them spans a call that can reach another (handlers run between accesses,
    // never inside one), so the runtime's dynamic exclusivity check on each class property
    // access (a thread-local access set, a fifth of a descriptor-driven pass) proves nothing.
    @exclusivity(unchecked) var modes: [LoopMode: ModeItems] = [:]
    /// The mode found last in `modes`, and its items (`existingItems(of:)`): a connection's
    /// source is added to and removed from one mode, whose name is then not hashed again.
    @exclusivity(unchecked) var lastModeItems: (mode: LoopMode, items: ModeItems)?
    @exclusivity(unchecked) var commonModes: Set<LoopMode> = [.default] {
        didSet { commonModesVersion &+= 1 }
    }
    /// Bumped when `commonModes` changes, so a batch of blocks need not hash its mode per block.
    @exclusivity(unchecked) var commonModesVersion = 0
    /// The last answer of `isCommon(_:)`, valid while `commonModesVersion` is unchanged.
    @exclusivity(unchecked) var commonModeAnswer: (mode: LoopMode, version: Int, isCommon: Bool)?
    /// Items added to `common`, to be put in modes made common later.
    let commonItems = ModeItems()
    /// Blocks drained from the inbox that wait for a pass in one of their modes.
    @exclusivity(unchecked) var held: [Work] = []
    /// An empty buffer, which the next drain into an empty `held` fills, so that `held` is
    /// not grown anew after every drain. During a burst the buffers keep their size.
    @exclusivity(unchecked) var spare: [Work] = []
    /// The most elements an idle loop's buffers keep room for: a burst must not pin its
    /// memory once it is over. Larger buffers are dropped when the loop goes to sleep.
    static let idleCapacityLimit = 4096
    /// The modes of the runs in progress, innermost last.
    @exclusivity(unchecked) var runStack: [LoopMode] = []
    /// The descriptor sources in at least one mode, by token.
    @exclusivity(unchecked) var descriptorSources: [SourceToken: DescriptorSource] = [:]
    /// The descriptor sources registered with no interest: not in the mode being run.
    @exclusivity(unchecked) var parkedSources: [SourceToken: DescriptorSource] = [:]
    /// The token of the descriptor source being added on the loop's thread to a mode it
    /// runs, registered armed already: its insertion need not park it and arm it again.
    @exclusivity(unchecked) var armedOnAdd: SourceToken?
    /// The source and mode items of the last ready descriptor found in a mode, so a loop
    /// serving one busy connection does not hash its token twice per pass. Cleared whenever
    /// a descriptor source enters or leaves a mode.
    @exclusivity(unchecked) var lastReady: (token: SourceToken, source: DescriptorSource, items: ModeItems)?
    /// The ready events' buffer, kept between passes so a pass does not allocate one. A run
    /// nested in a handler finds it taken (empty) and grows its own.
    @exclusivity(unchecked) var readyBuffer: [PollEvent] = []
    /// The custom sources signalled and not yet performed.
    let signalled = SignalledSources()
    /// How long the loop spins for work before an unwatched sleep, in nanoseconds (0: never).
    @exclusivity(unchecked) var spinWindow = 0
    /// Set once the thread ended and the loop was torn down; a source's `cancel` that
    /// runs as the loop ends (on its thread) finds it set. Read on the loop's thread only.
    @exclusivity(unchecked) package internal(set) var ended = false
    /// Set when the poller's wait failed (its descriptor was closed or broken under it): the
    /// loop can no longer sleep or watch descriptors, its inbox is closed, and every run
    /// throws this. See `runAcceptedBlocks()`.
    @exclusivity(unchecked) package internal(set) var failure: ThreadLoopError?

    init(name: String) throws(ThreadLoopError) {
        do {
            poller = try PlatformPoller()
        } catch {
            throw ThreadLoopError("poller create", error)
        }
        self.name = name
    }

    // MARK: Work from any thread

    /// Schedules `block` to run on the loop's thread, on a later pass in one of `modes`.
    ///
    /// Blocks run in the order they were performed from one thread. Performing wakes the
    /// loop if it sleeps. A block performed in modes the loop is not running waits until
    /// the loop runs one of them.
    /// - Parameters:
    ///   - modes: where the block may run; by default every common mode.
    ///   - label: a name for the work, shown by the stall monitor.
    ///   - block: the work.
    /// - Throws: `ThreadLoopError.loopEnded` if the loop's thread has ended (the block is
    ///   not kept).
    public func perform(
        inModes modes: [LoopMode] = [.common], label: String? = nil,
        _ block: @escaping @Sendable () -> Void
    ) throws(ThreadLoopError) {
        let modes = BlockModes(modes)
        if case .common = modes, label == nil {
            try enqueue { .block(block) }
        } else {
            try enqueue { .blockIn(modes, label, block) }
        }
    }

    /// Performs `block` in every common mode: `perform(inModes: [.common], ...)` without
    /// looking at an array of modes.
    package func performInCommonModes(label: String?, _ block: @escaping @Sendable () -> Void) throws(ThreadLoopError) {
        if let label {
            try enqueue { .blockIn(.common, label, block) }
        } else {
            try enqueue { .block(block) }
        }
    }

    /// Performs `block` in every common mode; when `closing`, no work is accepted after it.
    package func performFinal(label: String?, _ block: @escaping @Sendable () -> Void) throws(ThreadLoopError) {
        try enqueue(closing: true) { .blockIn(.common, label, block) }
    }

    /// Enqueues an executor job, run on a pass in any common mode.
    package func enqueue(job: UnownedJob, on target: JobTarget) throws(ThreadLoopError) {
        try enqueue { .job(job, target) }
    }

    /// Whether no work waits in the inbox (it may still be held or running).
    package var inboxIsEmpty: Bool { inbox.isEmpty }

    /// Whether the loop no longer accepts work.
    package var isClosed: Bool { inbox.isClosed }

    /// Runs `change` on the loop's thread: now when called there, else on its next pass.
    func onLoopThread(_ change: @escaping @Sendable (ThreadLoop) -> Void) {
        if isCurrent {
            change(self)
        } else {
            // A loop whose thread ended has nothing left to change.
            try? enqueue { .command(change) }
        }
    }

    /// Makes a sleeping loop pass once, or the next sleep return at once. Safe from any thread.
    public func wakeUp() {
        // A loop that ended has nothing to wake for.
        guard !inbox.isClosed || !inbox.isEmpty else { return }
        // Sequentially consistent, with the load of `wakeState`: see `waitForWork`.
        wakeRequested.store(true, ordering: .sequentiallyConsistent)
        wakeIfAsleep()
    }

    /// Ends the innermost run in progress, which returns `.stopped`. Safe from any thread.
    /// If the loop is not running, its next run returns `.stopped` at once.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeUp()
    }

    // MARK: Configuration from any thread

    /// Marks `mode` common: every item in `common`, now and later, is in it too.
    public func addCommonMode(_ mode: LoopMode) {
        guard mode != .common else { return }
        onLoopThread { loop in
            guard loop.commonModes.insert(mode).inserted else { return }
            let items = loop.commonItems
            let common = items.observers.map(LoopItem.observer) + items.sourcesInOrder.map(LoopItem.source)
                + items.descriptors.values.map(LoopItem.descriptor) + items.timers.members.map(LoopItem.timer)
            for item in common { loop.insert(item, intoRealMode: mode) }
        }
    }

    /// Adds a timer to a mode (`common` for every common mode). A timer belongs to one loop.
    /// - Throws: `.invalidated`, `.scheduledOnAnotherLoop`, `.loopEnded`.
    public func add(_ timer: LoopTimer, forMode mode: LoopMode = .default) throws(ThreadLoopError) {
        try add(.timer(timer), mode)
    }

    /// Adds an observer to a mode (`common` for every common mode).
    /// - Throws: `.invalidated`, `.scheduledOnAnotherLoop`, `.loopEnded`.
    public func add(_ observer: LoopObserver, forMode mode: LoopMode = .default) throws(ThreadLoopError) {
        try add(.observer(observer), mode)
    }

    /// Adds a custom source to a mode (`common` for every common mode); its `schedule` runs.
    /// - Throws: `.invalidated`, `.scheduledOnAnotherLoop`, `.loopEnded`.
    public func add(_ source: LoopSource, forMode mode: LoopMode = .default) throws(ThreadLoopError) {
        try add(.source(source), mode)
    }

    /// Starts watching a descriptor in a mode (`common` for every common mode).
    /// - Throws: `.descriptorAlreadyWatched` when another source of this loop watches the
    ///   descriptor, `.system` when the kernel refuses it (a bad descriptor, a regular file),
    ///   `.invalidated`, `.scheduledOnAnotherLoop`, `.loopEnded`.
    public func add(_ source: DescriptorSource, forMode mode: LoopMode = .default) throws(ThreadLoopError) {
        try checkOpen()
        // Registering is thread-safe in the kernel, so its errors reach the caller now. The
        // descriptor starts parked (no events) until the loop's thread arms it; added on that
        // thread to a mode it runs, it is registered armed (one system call, not two).
        let mustRegister = try source.attachment.withLock { (a) throws(ThreadLoopError) -> Bool in
            try a.attach(to: self)
            defer { a.registered = true }
            return !a.registered
        }
        let armNow = mustRegister && isCurrent && runStack.last.map { $0 == mode || (mode == .common && isCommon($0)) } == true
        if mustRegister {
            do {
                try poller.register(
                    FileDescriptor(rawValue: source.descriptor), interest: armNow ? source.pollInterest : [], token: source.token.raw)
            } catch {
                source.attachment.withLock { a in
                    a.registered = false
                    if a.modes.isEmpty { a.loop = nil }
                }
                // EEXIST: this descriptor is in the loop's poller already, for another source.
                if error == .alreadyExists { throw .descriptorAlreadyWatched(source.descriptor) }
                throw ThreadLoopError("poller register(\(source.descriptor))", error)
            }
        }
        guard armNow else {
            if isCurrent { return insert(.descriptor(source), into: mode) }
            return onLoopThread { loop in loop.insert(.descriptor(source), into: mode) }
        }
        armedOnAdd = source.token
        insert(.descriptor(source), into: mode)
        armedOnAdd = nil
        // Invalidated meanwhile, it was not inserted: parked, as a source added from another
        // thread would be, so that it reports nothing.
        if descriptorSources[source.token] !== source {
            try? poller.modify(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token.raw)
        }
    }

    /// Removes a timer from a mode; it stays valid and can be added again.
    public func remove(_ timer: LoopTimer, forMode mode: LoopMode = .default) { remove(.timer(timer), mode) }
    /// Removes an observer from a mode.
    public func remove(_ observer: LoopObserver, forMode mode: LoopMode = .default) { remove(.observer(observer), mode) }
    /// Removes a custom source from a mode; its `cancel` runs.
    public func remove(_ source: LoopSource, forMode mode: LoopMode = .default) { remove(.source(source), mode) }
    /// Stops watching a descriptor in a mode. On the loop's thread, no callback for that
    /// mode runs after this returns.
    public func remove(_ source: DescriptorSource, forMode mode: LoopMode = .default) { remove(.descriptor(source), mode) }

    // MARK: Running (loop thread)

    /// The mode of the innermost run in progress, or `nil` when the loop is not running
    /// (or when asked from another thread).
    public var currentMode: LoopMode? { isCurrent ? runStack.last : nil }

    /// The instant the next timer of `mode` is due to fire, or `nil` when the mode has no
    /// valid timer: CoreFoundation's `CFRunLoopGetNextTimerFireDate`, or NSRunLoop's
    /// `limitDate(forMode:)` without the pass that one makes. For `common`, the next of the
    /// timers added to the common modes. A timer with a tolerance may fire up to that much
    /// later; one whose handler is running is not counted until it is rescheduled.
    ///
    /// Asks about the loop's own state, which only its thread may read: call it on the
    /// loop's thread. From another thread it traps (a precondition); ask there with
    /// `perform` instead.
    public func limitDate(forMode mode: LoopMode) -> ContinuousClock.Instant? {
        precondition(isCurrent, "ThreadLoop.limitDate(forMode:) is for the loop's own thread")
        guard let items = mode == .common ? commonItems : modes[mode] else { return nil }
        var next: ContinuousClock.Instant?
        for entry in items.timers.entries where entry.timer.isValid {
            if next.map({ entry.fireDate < $0 }) ?? true { next = entry.fireDate }
        }
        return next
    }

    /// Runs the loop in the default mode until it is stopped or has nothing left to do.
    /// - Throws: `.notOnLoopThread` when called from another thread.
    public func run() throws(ThreadLoopError) {
        while true {
            let result = try run(mode: .default, until: nil)
            if result == .stopped || result == .finished { return }
        }
    }

    /// Runs the loop in `mode` for at most `duration`.
    /// - Throws: `.notOnLoopThread` when called from another thread.
    @discardableResult
    public func run(
        mode: LoopMode = .default, for duration: Duration, returnAfterSourceHandled: Bool = false
    ) throws(ThreadLoopError) -> LoopRunResult {
        try run(mode: mode, until: .now + duration, returnAfterSourceHandled: returnAfterSourceHandled)
    }

    /// Runs the loop in `mode` until `deadline` (`nil`: no deadline), and says why it returned.
    ///
    /// Returns `.finished` at once if the mode has no timers, sources or blocks; a deadline in
    /// the past makes one pass without sleeping and returns `.timedOut` (unless something
    /// else ended it). Runs nest: a handler may run the loop again, in the same or another
    /// mode, and `stop()` ends only the innermost run.
    /// - Throws: `.notOnLoopThread` when called from another thread; `.system` when the
    ///   loop's poller failed (a wait on its descriptor was refused): the loop can no longer
    ///   wait, it takes no more work, and every later run throws the same error.
    @discardableResult
    public func run(
        mode: LoopMode, until deadline: ContinuousClock.Instant?, returnAfterSourceHandled: Bool = false
    ) throws(ThreadLoopError) -> LoopRunResult {
        guard isCurrent else { throw .notOnLoopThread }
        precondition(mode != .common, "run in a real mode; `common` is a set of modes")
        if let failure { throw failure }
        guard !ended else { return .finished }
        drainInbox()
        if isEmpty(mode) { return .finished }

        runStack.append(mode)
        rearmParked(in: mode)
        let modeItems = items(of: mode)
        notify(.entry, modeItems)
        defer {
            notify(.exit, modeItems)
            runStack.removeLast()
            rearmParked(in: runStack.last)
        }
        return try runPasses(mode, modeItems, deadline: deadline, returnAfterSourceHandled: returnAfterSourceHandled)
    }

    /// After the poller failed (`failure`): runs, in order, the blocks and jobs the loop
    /// accepted before its inbox closed, in `mode` and every common mode, so no accepted
    /// work is dropped silently. What they perform in turn is refused (`.loopEnded`).
    package func runAcceptedBlocks(in mode: LoopMode = .default) {
        precondition(isCurrent, "ThreadLoop.runAcceptedBlocks is for the loop's own thread")
        repeat {
            drainInbox()
            runBlocks(mode)
        } while !inbox.isEmpty
    }

}
