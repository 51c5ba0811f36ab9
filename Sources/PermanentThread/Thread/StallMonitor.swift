import CPortKitSystem
import Synchronization
import PortKitSystem

/// Reports when a run loop stays busy in one activity longer than a threshold: a block,
/// timer or source handler that blocks its thread.
///
/// An observer on the watched loop (in its common modes) stamps each activity with the
/// time into an atomic; a watchdog, its own `PermanentThread` with a repeating timer,
/// checks the stamp every `slice`. When the loop is in a busy activity (entry, before
/// timers, before sources, after waiting; not asleep before waiting, not outside a run)
/// and the stamp has not changed for `slices` consecutive checks (by default 5 slices of
/// 50 ms, as in the classic run-loop stall monitors), `onStall` receives one report for
/// that stall, on the watchdog's thread. Nothing is printed.
///
/// The report names the thread, the activity, how long, the label of the block running,
/// and, with `capturesStack`, the stalled thread's own stack: the watchdog sends it
/// `SIGURG` and its handler records a backtrace. Like any signal, that makes a blocking
/// call the kernel does not restart (`nanosleep`, `epoll_wait`, …) return early with
/// `EINTR` on the stalled thread; pass `capturesStack: false` to avoid it.
///
/// Blocks queued together run in one step of a pass; if together they take longer than
/// the threshold, that is reported too (the loop could not reach its timers and sources),
/// with the label of the block running when the watchdog noticed.
public final class StallMonitor: Sendable {
    /// The name used in reports.
    public let name: String
    /// The watchdog's period.
    public let slice: Duration
    /// How many consecutive slices without progress make a stall.
    public let slices: Int
    /// `slice * slices`: how long the loop must stay in one busy activity to be reported.
    public var threshold: Duration { slice * slices }

    private let observer: LoopObserver
    private let timer: LoopTimer
    private let watchdog: PermanentThread

    /// Starts watching `loop`.
    /// - Parameters:
    ///   - loop: the loop to watch; any thread's.
    ///   - name: the name in reports; the loop's name by default.
    ///   - slice: the watchdog's period; 50 ms by default.
    ///   - slices: consecutive slices without progress that make a stall; 5 by default.
    ///   - capturesStack: whether to capture the stalled thread's stack (see above).
    ///   - onStall: called on the watchdog's thread with each report.
    /// - Throws: `.loop` if the observer cannot be added (the loop's thread has ended),
    ///   `.system` (`pthread_create`) if the watchdog thread cannot be started.
    public init(
        watching loop: ThreadLoop, name: String? = nil, slice: Duration = .milliseconds(50), slices: Int = 5,
        capturesStack: Bool = true, onStall: @escaping @Sendable (StallReport) -> Void
    ) throws(PermanentThreadError) {
        precondition(slice > .zero && slices > 0, "a stall monitor needs a positive slice and slice count")
        let name = name ?? loop.name
        self.name = name
        self.slice = slice
        self.slices = slices
        let probe = StallProbe()
        observer = LoopObserver(activities: .all, order: .min) { _, activity in probe.record(activity) }
        let watch = Watch(
            name: name, loop: loop, probe: probe, slices: slices, threshold: slice * slices,
            capturesStack: capturesStack, onStall: onStall)
        timer = LoopTimer(after: slice, repeating: slice) { _ in watch.check() }
        watchdog = PermanentThread(name: "stall-watchdog")
        do {
            try loop.add(observer, forMode: .common)
        } catch {
            throw .loop(error)
        }
        do {
            try watchdog.run()
            try watchdog.loop?.add(timer, forMode: .common)
        } catch let error as PermanentThreadError {
            observer.invalidate()
            throw error
        } catch {
            observer.invalidate()
            throw .loop(error as? ThreadLoopError ?? .loopEnded)
        }
    }

    /// Starts watching a running permanent thread's loop; reports carry the thread's name.
    /// - Throws: `.notStarted` before the thread's `run()`, `.stopped` after its `stop()`,
    ///   and what `init(watching:name:…)` throws.
    public convenience init(
        watching thread: PermanentThread, slice: Duration = .milliseconds(50), slices: Int = 5,
        capturesStack: Bool = true, onStall: @escaping @Sendable (StallReport) -> Void
    ) throws(PermanentThreadError) {
        guard let loop = thread.loop else { throw thread.isStopRequested ? .stopped : .notStarted }
        try self.init(
            watching: loop, name: thread.name, slice: slice, slices: slices, capturesStack: capturesStack,
            onStall: onStall)
    }

    /// Stops watching: removes the observer and ends the watchdog thread. Safe from any
    /// thread (from `onStall` too), more than once.
    public func stop() {
        observer.invalidate()
        timer.invalidate()
        watchdog.stop()
    }

    /// Stops watching.
    deinit {
        stop()
    }
}

/// The observer's side: the activity the loop is in and since when, packed in one atomic
/// word (activity code in the top byte, nanoseconds since `base` below).
final class StallProbe: Sendable {
    let stamp = Atomic<UInt64>(0)
    let threadID = Atomic<Int32>(0)
    let base = ContinuousClock.now
    private let nesting = Nesting()

    static let codes: [LoopActivity] = [[], .entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit]
    static let busyCodes: Set<UInt64> = [1, 2, 3, 5]

    // Why unchecked Sendable is safe: observer callbacks all run on the watched loop's
    // thread, the only one that touches this.
    private final class Nesting: @unchecked Sendable {
        /// The code of the activity the innermost run is in.
        var current: UInt64 = 0
        /// The activities the enclosing runs were in, when a handler runs the loop again.
        var outer: [UInt64] = []
    }

    /// On the watched loop's thread.
    func record(_ activity: LoopActivity) {
        if threadID.load(ordering: .relaxed) == 0 { threadID.store(ThreadIdentity.kernelID, ordering: .relaxed) }
        let code = UInt64(Self.codes.firstIndex(of: activity) ?? 0)
        switch activity {
        case .entry:
            nesting.outer.append(nesting.current)
            nesting.current = code
        case .exit:
            // Back in the enclosing run's activity (its handler goes on), or outside any run.
            let outer = nesting.outer.popLast() ?? 0
            nesting.current = outer == 0 ? code : outer
        default:
            nesting.current = code
        }
        let elapsed = (ContinuousClock.now - base).components
        let nanoseconds = UInt64(elapsed.seconds) &* 1_000_000_000 &+ UInt64(elapsed.attoseconds / 1_000_000_000)
        stamp.store(nesting.current << 56 | nanoseconds & (1 << 56 - 1), ordering: .releasing)
    }
}

/// The watchdog's side: counts checks without progress and makes the report.
// Safety of @unchecked Sendable: `lastStamp`, `unchanged` and `reported` are touched
// only by `check()`, which runs on the watchdog's thread (its timer); the rest are lets
// of Sendable types.
private final class Watch: @unchecked Sendable {
    let name: String
    let loop: ThreadLoop
    let probe: StallProbe
    let slices: Int
    let threshold: Duration
    let capturesStack: Bool
    let onStall: @Sendable (StallReport) -> Void
    private var lastStamp: UInt64 = 0
    private var unchanged = 0
    private var reported = false

    init(
        name: String, loop: ThreadLoop, probe: StallProbe, slices: Int, threshold: Duration, capturesStack: Bool,
        onStall: @escaping @Sendable (StallReport) -> Void
    ) {
        self.name = name
        self.loop = loop
        self.probe = probe
        self.slices = slices
        self.threshold = threshold
        self.capturesStack = capturesStack
        self.onStall = onStall
    }

    func check() {
        let stamp = probe.stamp.load(ordering: .acquiring)
        guard stamp == lastStamp else {
            lastStamp = stamp
            unchanged = 0
            reported = false
            return
        }
        let code = stamp >> 56
        guard StallProbe.busyCodes.contains(code), !reported else { return }
        unchanged += 1
        let since = probe.base + .nanoseconds(Int64(stamp & (1 << 56 - 1)))
        let duration = ContinuousClock.now - since
        guard unchanged >= slices, duration >= threshold else { return }
        reported = true
        let label = loop.runningLabel.withLock { $0 }
        let threadID = probe.threadID.load(ordering: .relaxed)
        let stack = capturesStack ? StackSampler.sample(threadID: threadID) : []
        onStall(StallReport(
            name: name, threadID: threadID, activity: StallProbe.codes[Int(code)], duration: duration,
            label: label, stack: stack))
    }
}
