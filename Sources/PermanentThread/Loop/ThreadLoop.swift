import Glibc
import CPortKitSystem
import Synchronization

/// A run loop: the event engine of one thread, with CoreFoundation's semantics.
///
/// Every thread has at most one, made the first time the thread asks for
/// `ThreadLoop.current` and torn down (descriptors closed, sources cancelled) when the
/// thread ends; `ThreadLoop.main` is the main thread's. A loop sleeps in the kernel
/// (a futex while it watches no descriptor, else epoll) until a timer is due, a watched descriptor is ready, a custom source is
/// signalled, a block is performed, or it is woken.
///
/// Any thread may add and remove timers, observers and sources, perform blocks, stop
/// or wake a loop: changes made from another thread are carried out on the loop's thread
/// on its next pass. Running the loop is for its own thread only.
// Safety of @unchecked Sendable: the state below "Loop thread only" is read and written
// only on the loop's own thread (every public entry point checks `isCurrent` and sends
// work through `inbox` otherwise); the state shared with other threads is `inbox` and
// `signalled.queue` (queues for many producers and this one consumer, see `WorkQueue`), the `wakeState`,
// `wakeRequested`, `stopRequested`, `wakesInFlight` and `deliveries` atomics, the
// `runningLabel` lock and immutable lets.
public final class ThreadLoop: @unchecked Sendable {

    // MARK: Shared with other threads

    let poller: EpollPoller
    /// What the loop sleeps on while it watches no descriptor (see `waitForWork`).
    private let wakeWord = WakeWord()
    /// Work sent to the loop, in order: blocks, jobs and changes (commands) alike.
    private let inbox = WorkQueue<Work>()
    /// The loop's sleep, as the wake handshake sees it: one of the `WakeState` values.
    private let wakeState = Atomic<Int>(WakeState.awake)
    /// Set by `wakeUp()`: the next sleep must return at once. Cleared by drains and sleeps.
    private let wakeRequested = Atomic<Bool>(false)
    private let stopRequested = Atomic<Bool>(false)
    /// Wake-ups claimed but maybe not yet delivered: the eventfd is closed only once none is
    /// in flight. Counted before the claim, so the loop's end cannot miss one.
    private let wakesInFlight = Atomic<Int>(0)
    /// How many wake-ups were delivered (futex or eventfd): tests prove wakes are coalesced.
    package var wakeDeliveries: Int { deliveries.load(ordering: .relaxed) }
    private let deliveries = Atomic<Int>(0)
    /// The optional label of the block being run, for the stall monitor.
    package let runningLabel = Locked<String?>(nil)
    /// The name given to the loop, shown in reports.
    public let name: String

    /// The values of `wakeState`. A producer that pushed, then finds the loop asleep, claims
    /// the single wake-up of that sleep by moving the state to `claimed`; only the loop's
    /// thread moves it back to `awake`.
    private enum WakeState {
        static let awake = 0
        /// Asleep (or about to be) on `wakeWord`.
        static let sleepingOnWord = 1
        /// Asleep (or about to be) in the poller.
        static let sleepingInPoller = 2
        /// A waker has claimed this sleep's wake-up.
        static let claimed = 3
    }

    // MARK: Loop thread only

    // `@exclusivity(unchecked)`: these are touched by the loop's thread alone, and no access
    // to one of them spans a call that can reach another (handlers run between accesses,
    // never inside one), so the runtime's dynamic exclusivity check on each class property
    // access (a thread-local access set, a fifth of a descriptor-driven pass) proves nothing.
    @exclusivity(unchecked) private var modes: [LoopMode: ModeItems] = [:]
    @exclusivity(unchecked) private var commonModes: Set<LoopMode> = [.default] {
        didSet { commonModesVersion &+= 1 }
    }
    /// Bumped when `commonModes` changes, so a batch of blocks need not hash its mode per block.
    @exclusivity(unchecked) private var commonModesVersion = 0
    /// The last answer of `isCommon(_:)`, valid while `commonModesVersion` is unchanged.
    @exclusivity(unchecked) private var commonModeAnswer: (mode: LoopMode, version: Int, isCommon: Bool)?
    /// Items added to `common`, to be put in modes made common later.
    private let commonItems = ModeItems()
    /// Blocks drained from the inbox that wait for a pass in one of their modes.
    @exclusivity(unchecked) private var held: [Work] = []
    /// An empty buffer, which the next drain into an empty `held` fills, so that `held` is
    /// not grown anew after every drain. During a burst the buffers keep their size.
    @exclusivity(unchecked) private var spare: [Work] = []
    /// The most elements an idle loop's buffers keep room for: a burst must not pin its
    /// memory once it is over. Larger buffers are dropped when the loop goes to sleep.
    private static let idleCapacityLimit = 4096
    /// The modes of the runs in progress, innermost last.
    @exclusivity(unchecked) private var runStack: [LoopMode] = []
    @exclusivity(unchecked) private var descriptorSources: [UInt64: DescriptorSource] = [:]
    @exclusivity(unchecked) private var parkedSources: [UInt64: DescriptorSource] = [:]
    /// The source and mode items of the last ready descriptor found in a mode, so a loop
    /// serving one busy connection does not hash its token twice per pass. Cleared whenever
    /// a descriptor source enters or leaves a mode.
    @exclusivity(unchecked) private var lastReady: (token: UInt64, source: DescriptorSource, items: ModeItems)?
    /// The ready events' buffer, kept between passes so a pass does not allocate one. A run
    /// nested in a handler finds it taken (empty) and grows its own.
    @exclusivity(unchecked) private var readyBuffer: [PollEvent] = []
    /// The custom sources signalled and not yet performed.
    private let signalled = SignalledSources()
    /// How long the loop spins for work before a sleep on its word, in nanoseconds (0: never).
    @exclusivity(unchecked) private var spinWindow = 0
    @exclusivity(unchecked) private var ended = false

    init(name: String) throws(ThreadLoopError) {
        do {
            poller = try EpollPoller()
        } catch {
            throw ThreadLoopError("epoll_create1/eventfd", error)
        }
        self.name = name
    }

    // MARK: One loop per thread

    /// The loop of the calling thread, made on first use.
    ///
    /// Traps only if the process is out of descriptors when the loop is first made; use
    /// `forCurrentThread()` to get that as an error instead.
    public static var current: ThreadLoop {
        do {
            return try forCurrentThread()
        } catch {
            fatalError("ThreadLoop.current: cannot make a loop for this thread: \(error)")
        }
    }

    /// The loop of the calling thread, made on first use; throws if it cannot be made.
    public static func forCurrentThread() throws(ThreadLoopError) -> ThreadLoop {
        if let raw = pthread_getspecific(loopKey) {
            return Unmanaged<ThreadLoop>.fromOpaque(raw).takeUnretainedValue()
        }
        let loop = isMainThread ? mainLoop : try ThreadLoop(name: currentThreadName())
        // The loop sleeps exactly until its next timer (tolerance is its own business), so
        // the kernel's default 50 µs of slack on the sleep is taken away.
        _ = portkit_set_timer_slack(1)
        pthread_setspecific(loopKey, Unmanaged.passRetained(loop).toOpaque())
        return loop
    }

    /// The main thread's loop. Usable from any thread; it runs when the main thread runs it.
    public static var main: ThreadLoop { mainLoop }

    /// Whether the calling thread is this loop's thread.
    public var isCurrent: Bool {
        pthread_getspecific(loopKey) == Unmanaged.passUnretained(self).toOpaque()
    }

    private static var isMainThread: Bool { getpid() == portkit_gettid() }

    private static func currentThreadName() -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        portkit_get_thread_name(&buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Called by the thread-exit destructor: cancel everything and close descriptors.
    fileprivate func threadDidEnd() {
        // Closed first, released after: a dropped block may hold the last reference to
        // something whose deinit calls back into this loop (and finds it closed). Producers
        // that reserved a slot before the close finish writing it; `pop` waits for them.
        inbox.close()
        var dropped: [Work] = []
        while let work = inbox.pop() { dropped.append(work) }
        _ = consume dropped
        ended = true
        signalled.close()
        for (mode, items) in modes {
            for source in items.sourcesInOrder { source.onCancel?(self, mode) }
        }
        var everything: [LoopItem] = []
        for items in modes.values {
            everything += items.observers.map(LoopItem.observer) + items.sources.values.map { LoopItem.source($0.source) }
            everything += items.descriptors.values.map(LoopItem.descriptor)
            everything += items.timers.members.map(LoopItem.timer)
        }
        for item in everything {
            item.withAttachment { attachment in
                if attachment.loop === self { attachment = Attachment(loop: nil, isValid: attachment.isValid) }
            }
        }
        modes.removeAll()
        held.removeAll()
        spare = []
        descriptorSources.removeAll()
        parkedSources.removeAll()
        lastReady = nil
        commonItems.timers = TimerHeap()
        // No new wake can be claimed (the loop is awake and the inbox closed); let the ones
        // in flight land. Sequentially consistent: a claim made during the last sleep was
        // counted before it, so this load sees it.
        while wakesInFlight.load(ordering: .sequentiallyConsistent) > 0 { sched_yield() }
        poller.close()
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
    private func enqueue(closing: Bool = false, _ work: () -> Work) throws(ThreadLoopError) {
        guard inbox.push(closing: closing, work) else { throw .loopEnded }
        // The push's exchange was sequentially consistent: with this load, it is the Dekker
        // handshake with `waitForWork`, which publishes its sleep, then looks at the inbox.
        let state = wakeState.load(ordering: .sequentiallyConsistent)
        if state == WakeState.sleepingOnWord || state == WakeState.sleepingInPoller { claimWake(state) }
    }

    /// Found the loop asleep (in `state`): claims the sleep's one wake-up and delivers it,
    /// unless another caller claimed it first or the loop woke meanwhile.
    private func claimWake(_ state: Int) {
        // Counted before the claim: once the loop has seen the claim (it is awake again),
        // its end waits for this delivery before it closes the eventfd.
        wakesInFlight.add(1, ordering: .sequentiallyConsistent)
        let (claimed, _) = wakeState.compareExchange(
            expected: state, desired: WakeState.claimed, ordering: .sequentiallyConsistent)
        if claimed {
            deliveries.add(1, ordering: .relaxed)
            if state == WakeState.sleepingOnWord { wakeWord.wake() } else { poller.wakeUp() }
        }
        wakesInFlight.subtract(1, ordering: .releasing)
    }

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
    private func onLoopThread(_ change: @escaping @Sendable (ThreadLoop) -> Void) {
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
        let state = wakeState.load(ordering: .sequentiallyConsistent)
        if state == WakeState.sleepingOnWord || state == WakeState.sleepingInPoller { claimWake(state) }
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
        // descriptor starts parked (no events) until the loop's thread arms it.
        let mustRegister = try source.attachment.withLock { (a) throws(ThreadLoopError) -> Bool in
            try a.attach(to: self)
            defer { a.registered = true }
            return !a.registered
        }
        if mustRegister {
            do {
                try poller.register(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token)
            } catch {
                source.attachment.withLock { a in
                    a.registered = false
                    if a.modes.isEmpty { a.loop = nil }
                }
                // EEXIST: this descriptor is in the loop's epoll set already, for another source.
                if error == .alreadyExists { throw .descriptorAlreadyWatched(source.descriptor) }
                throw ThreadLoopError("epoll_ctl(ADD, \(source.descriptor))", error)
            }
        }
        onLoopThread { loop in loop.insert(.descriptor(source), into: mode) }
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

    private func add(_ item: LoopItem, _ mode: LoopMode) throws(ThreadLoopError) {
        try checkOpen()
        try item.withAttachment { (a) throws(ThreadLoopError) in try a.attach(to: self) }
        onLoopThread { loop in loop.insert(item, into: mode) }
    }

    /// Changes from other threads travel through the inbox, which a loop that ended (or a
    /// stopped permanent thread's loop) no longer takes.
    private func checkOpen() throws(ThreadLoopError) {
        if !isCurrent && inbox.isClosed { throw .loopEnded }
    }

    private func remove(_ item: LoopItem, _ mode: LoopMode) {
        onLoopThread { loop in loop.remove(item, from: mode) }
    }

    /// Told by an item's `invalidate()`: take it out of every mode.
    func itemInvalidated(_ item: LoopItem) {
        onLoopThread { loop in loop.removeEverywhere(item) }
    }

    // MARK: Mode bookkeeping (loop thread)

    private func items(of mode: LoopMode) -> ModeItems {
        if let items = modes[mode] { return items }
        let items = ModeItems()
        modes[mode] = items
        return items
    }

    private func insert(_ item: LoopItem, into mode: LoopMode) {
        guard item.withAttachment({ $0.isValid && $0.loop === self }) else { return }
        if mode == .common {
            guard commonItems.insert(item) else { return }
            for common in commonModes { insert(item, intoRealMode: common) }
        } else {
            insert(item, intoRealMode: mode)
        }
    }

    private func insert(_ item: LoopItem, intoRealMode mode: LoopMode) {
        let target = items(of: mode)
        guard target.insert(item) else { return }
        let firstMode = item.withAttachment { a in a.modes.insert(mode); return a.modes.count == 1 }
        switch item {
        case .timer:
            break
        case .source(let source):
            source.onSchedule?(self, mode)
            // Signalled while in no mode of this loop (or before it was ever added): queued now.
            if source.isSignalled {
                signalled.add(source)
                wakeUp()
            }
        case .descriptor(let source):
            lastReady = nil
            if firstMode {
                descriptorSources[source.token] = source
                // Deregistered by a removal that was carried out after this add was made.
                let registered = source.attachment.withLock { a in defer { a.registered = true }; return a.registered }
                if !registered {
                    try? poller.register(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token)
                }
            }
            // Armed now if the loop runs this mode; otherwise it stays parked until it does.
            if runStack.last == mode || firstMode {
                parkedSources[source.token] = source
                rearmParked(in: runStack.last)
            }
        case .observer:
            break
        }
    }

    private func remove(_ item: LoopItem, from mode: LoopMode) {
        if mode == .common {
            guard commonItems.remove(item) else { return }
            for common in commonModes { remove(item, fromRealMode: common) }
        } else {
            remove(item, fromRealMode: mode)
        }
    }

    private func remove(_ item: LoopItem, fromRealMode mode: LoopMode) {
        guard let target = modes[mode], target.remove(item) else { return }
        let lastMode = item.withAttachment { a in a.modes.remove(mode); return a.modes.isEmpty }
        switch item {
        case .timer:
            break
        case .source(let source):
            source.onCancel?(self, mode)
        case .descriptor(let source):
            lastReady = nil
            if lastMode {
                descriptorSources[source.token] = nil
                parkedSources[source.token] = nil
                try? poller.deregister(FileDescriptor(rawValue: source.descriptor))
                source.attachment.withLock { $0.registered = false }
            }
        case .observer:
            break
        }
        if lastMode {
            item.withAttachment { a in if a.loop === self { a.loop = nil } }
        }
    }

    private func removeEverywhere(_ item: LoopItem) {
        _ = commonItems.remove(item)
        for mode in item.withAttachment({ $0.modes }) { remove(item, fromRealMode: mode) }
    }

    /// Re-arms the parked descriptor sources of `mode` (after a run in another mode).
    private func rearmParked(in mode: LoopMode?) {
        guard let mode, !parkedSources.isEmpty, let items = modes[mode] else { return }
        for (token, source) in parkedSources where items.descriptors[token] != nil {
            parkedSources[token] = nil
            try? poller.modify(FileDescriptor(rawValue: source.descriptor), interest: source.pollInterest, token: token)
        }
    }

    private func park(_ source: DescriptorSource) {
        parkedSources[source.token] = source
        try? poller.modify(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token)
    }

    // MARK: Running (loop thread)

    /// The mode of the innermost run in progress, or `nil` when the loop is not running
    /// (or when asked from another thread).
    public var currentMode: LoopMode? { isCurrent ? runStack.last : nil }

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
    /// - Throws: `.notOnLoopThread` when called from another thread.
    @discardableResult
    public func run(
        mode: LoopMode, until deadline: ContinuousClock.Instant?, returnAfterSourceHandled: Bool = false
    ) throws(ThreadLoopError) -> LoopRunResult {
        guard isCurrent else { throw .notOnLoopThread }
        precondition(mode != .common, "run in a real mode; `common` is a set of modes")
        guard !ended else { return .finished }
        drainInbox()
        if isEmpty(mode) { return .finished }

        runStack.append(mode)
        rearmParked(in: mode)
        let modeItems = items(of: mode)
        notify(.entry, modeItems)
        let result = runPasses(mode, modeItems, deadline: deadline, returnAfterSourceHandled: returnAfterSourceHandled)
        notify(.exit, modeItems)
        runStack.removeLast()
        rearmParked(in: runStack.last)
        return result
    }

    /// The passes of one run, in CoreFoundation's order; observers see exactly this.
    private func runPasses(
        _ mode: LoopMode, _ items: ModeItems, deadline: ContinuousClock.Instant?, returnAfterSourceHandled: Bool
    ) -> LoopRunResult {
        if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
        let pollOnly = deadline.map { $0 <= .now } ?? false
        // Asked once: `ContinuousClock.Instant` is resilient, so every copy of an optional
        // one is a call through its value witnesses; a run without a deadline makes none.
        let hasDeadline = deadline != nil
        while true {
            notify(.beforeTimers, items)
            notify(.beforeSources, items)
            runBlocks(mode)
            var sourceHandled = performSignalledSources(items, stopAfterOne: returnAfterSourceHandled)
            if sourceHandled { runBlocks(mode) }

            let poll = sourceHandled || pollOnly
            if !poll { notify(.beforeWaiting, items) }
            let sleep: Duration?
            if poll {
                sleep = .zero
            } else if !hasDeadline && items.timers.isEmpty {
                sleep = nil  // until woken
            } else {
                sleep = timeout(items, deadline)
            }
            var ready = waitForWork(timeout: sleep)
            if !poll { notify(.afterWaiting, items) }

            fireDueTimers(mode, items)
            if !ready.isEmpty {
                if handleReadyDescriptors(ready, items) { sourceHandled = true }
                ready.removeAll(keepingCapacity: true)
            }
            if readyBuffer.capacity < ready.capacity { swap(&readyBuffer, &ready) }
            runBlocks(mode)

            if sourceHandled && returnAfterSourceHandled { return .handledSource }
            if hasDeadline, let deadline, deadline <= .now { return .timedOut }
            if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
            if isEmpty(mode, items) { return .finished }
        }
    }

    private func notify(_ activity: LoopActivity, _ items: ModeItems) {
        guard items.observedActivities.contains(activity) else { return }
        for observer in items.observers where observer.activities.contains(activity) {
            guard observer.isValid else { continue }
            if !observer.repeats { observer.invalidate() }
            observer.handler(observer, activity)
        }
    }

    /// `commonModes.contains(mode)`, without hashing the mode's name on every pass: a run
    /// asks about the same mode again and again.
    private func isCommon(_ mode: LoopMode) -> Bool {
        if let answer = commonModeAnswer, answer.version == commonModesVersion, answer.mode == mode {
            return answer.isCommon
        }
        let isCommon = commonModes.contains(mode)
        commonModeAnswer = (mode, commonModesVersion, isCommon)
        return isCommon
    }

    /// Nothing in the mode could make a run in it do anything.
    private func isEmpty(_ mode: LoopMode) -> Bool {
        isEmpty(mode, modes[mode])
    }

    /// `isEmpty(mode)` when the run already has the mode's items (no dictionary lookup).
    private func isEmpty(_ mode: LoopMode, _ items: ModeItems?) -> Bool {
        if let items, !items.hasNoSourcesOrTimers { return false }
        let modeIsCommon = isCommon(mode)
        return !held.contains { matches($0, mode, modeIsCommon: modeIsCommon) }
    }

    /// Whether `work` may run in `mode`; `modeIsCommon` is `commonModes.contains(mode)`.
    private func matches(_ work: Work, _ mode: LoopMode, modeIsCommon: Bool) -> Bool {
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
    private func drainInbox() {
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
    private func runBlocks(_ mode: LoopMode) {
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
    private func execute(_ work: Work) {
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

    private func performSignalledSources(_ items: ModeItems, stopAfterOne: Bool) -> Bool {
        signalled.perform(in: items, of: self, stopAfterOne: stopAfterOne)
    }

    /// Told by `LoopSource.signal()`, from any thread, by the caller that set the source's
    /// flag: queue it for a pass and wake the loop if it sleeps, as `enqueue` does for work.
    func sourceSignalled(_ source: LoopSource) {
        // A loop that ended takes no more signals.
        guard signalled.queue.push({ source }) else { return }
        let state = wakeState.load(ordering: .sequentiallyConsistent)
        if state == WakeState.sleepingOnWord || state == WakeState.sleepingInPoller { claimWake(state) }
    }

    /// Makes the loop spin for up to `window` before each sleep on its word: set by a
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

    private func timeout(_ items: ModeItems, _ deadline: ContinuousClock.Instant?) -> Duration? {
        var wake = deadline
        if let next = nextTimerDate(items) { wake = min(wake ?? next, next) }
        return wake.map { $0 - .now }
    }

    private func nextTimerDate(_ items: ModeItems) -> ContinuousClock.Instant? {
        items.timers.top?.latest
    }

    /// Sleeps (or polls); returns the ready descriptor events.
    ///
    /// A loop that watches no descriptor sleeps on `wakeWord` (a futex: one system call
    /// to wake, no epoll callback); one that does sleeps in the poller. Only the loop's
    /// thread adds descriptors, so the choice cannot go stale during the sleep.
    private func waitForWork(timeout: Duration?) -> [PollEvent] {
        var timeout = timeout
        var sleeping = false
        let onWord = descriptorSources.isEmpty
        if timeout != .zero && onWord && spinWindow > 0 && spinForWork(limit: timeout) { timeout = .zero }
        if timeout != .zero {
            // Dekker with the producers (all sequentially consistent): the loop publishes its
            // sleep, then looks at the inbox; a producer pushes, then looks at the sleep. One
            // of the two sees the other, so no work is left unwoken.
            let asleep = onWord ? WakeState.sleepingOnWord : WakeState.sleepingInPoller
            if onWord { wakeWord.reset() }
            wakeState.store(asleep, ordering: .sequentiallyConsistent)
            sleeping = true
            if inbox.hasWaiting || signalled.hasQueued || wakeRequested.load(ordering: .sequentiallyConsistent) {
                // Work came first: take the sleep back and only poll. If a waker claimed the
                // sleep meanwhile, its wake-up is not waited for (its thread may have been
                // preempted before delivering it): it lands later, as one early return of a
                // later sleep, still counted against this one.
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
        if stopRequested.load(ordering: .acquiring) { timeout = .zero }
        var ready: [PollEvent] = []
        swap(&ready, &readyBuffer)
        let mustSleep = !(timeout.map { $0 <= .zero } ?? false)
        if onWord {
            // A poll with no descriptor armed could only report the wake-up eventfd, whose
            // edge carries nothing the inbox flags do not: no system call at all.
            if sleeping && mustSleep { wakeWord.sleep(timeout: timeout) }
        } else {
            do {
                _ = try poller.wait(timeout: timeout) { ready.append($0) }
            } catch {
                // epoll_pwait2 fails only on a broken loop (EBADF/EINVAL); do not spin.
                fatalError("ThreadLoop \(name): epoll wait failed: \(error)")
            }
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

    private func fireDueTimers(_ mode: LoopMode, _ items: ModeItems) {
        guard !items.timers.isEmpty else { return }
        let now = ContinuousClock.now
        while let top = items.timers.top, top.latest <= now || top.fireDate <= now {
            // The timer stays in the mode, without an entry, while its handler runs.
            let timer = items.timers.popTop().timer
            timer.handler(timer)
            guard timer.isValid, timer.attachment.withLock({ $0.loop === self }) else { continue }
            if let interval = timer.interval {
                timer.setFireDate(timer.nextFireDate(after: .now, interval: interval))
                for mode in timer.attachment.withLock({ $0.modes }) { modes[mode]?.timers.reschedule(timer) }
            } else {
                timer.invalidate()
            }
        }
    }

    private func handleReadyDescriptors(_ ready: [PollEvent], _ items: ModeItems) -> Bool {
        var handled = false
        for event in ready {
            let source: DescriptorSource
            if let last = lastReady, last.token == event.token, last.items === items {
                source = last.source
            } else {
                // Removed since the wait (maybe by an earlier handler): no callback.
                guard let found = descriptorSources[event.token] else { continue }
                guard items.descriptors[event.token] != nil else { park(found); continue }
                lastReady = (event.token, found, items)
                source = found
            }
            var events: DescriptorEvents = []
            if event.events.contains(.readable) { events.insert(.readable) }
            if event.events.contains(.writable) { events.insert(.writable) }
            if event.events.contains(.hangup) { events.insert(.hangup) }
            if event.events.contains(.error) { events.insert(.error) }
            source.handler(source, events)
            handled = true
        }
        return handled
    }
}

/// The thread-local slot holding each thread's loop; its destructor ends the loop when
/// the thread exits.
private let loopKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        guard let raw else { return }
        let loop = Unmanaged<ThreadLoop>.fromOpaque(raw).takeRetainedValue()
        loop.threadDidEnd()
    }
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()

private let mainLoop: ThreadLoop = {
    do {
        return try ThreadLoop(name: "main")
    } catch {
        fatalError("ThreadLoop.main: cannot make the main loop: \(error)")
    }
}()
