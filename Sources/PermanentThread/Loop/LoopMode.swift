/// The name of a run-loop mode: a set of timers, sources and observers that are live
/// while the loop runs in it.
///
/// `default` is where items go unless told otherwise. `common` is not a mode a loop
/// runs in but a set: an item added to `common` is in every mode marked common
/// (`default`, and any mode passed to `ThreadLoop.addCommonMode(_:)`, even later).
public struct LoopMode: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The mode's name.
    public let rawValue: String

    /// Names a mode.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Names a mode.
    public init(_ name: String) { self.rawValue = name }

    /// Names a mode with a string literal: `let tracking: LoopMode = "tracking"`.
    public init(stringLiteral name: String) { self.rawValue = name }

    /// The mode's name.
    public var description: String { rawValue }

    /// The mode a loop runs in unless told otherwise.
    public static let `default` = LoopMode("default")

    /// The pseudo-mode standing for every mode marked common.
    public static let common = LoopMode("common")
}

/// The moments of a pass that observers can watch, in the order a pass meets them.
public struct LoopActivity: OptionSet, Hashable, Sendable, CustomStringConvertible {
    /// The raw bits.
    public let rawValue: UInt32

    /// Makes a set from raw bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// A run of the loop begins.
    public static let entry = LoopActivity(rawValue: 1 << 0)
    /// The loop is about to handle timers.
    public static let beforeTimers = LoopActivity(rawValue: 1 << 1)
    /// The loop is about to handle blocks and custom sources.
    public static let beforeSources = LoopActivity(rawValue: 1 << 2)
    /// The loop is about to sleep.
    public static let beforeWaiting = LoopActivity(rawValue: 1 << 5)
    /// The loop woke up, before it handles what woke it.
    public static let afterWaiting = LoopActivity(rawValue: 1 << 6)
    /// A run of the loop ends.
    public static let exit = LoopActivity(rawValue: 1 << 7)
    /// Every activity.
    public static let all: LoopActivity = [.entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit]

    /// "entry", "beforeTimers", … joined by "|".
    public var description: String {
        let names: [(LoopActivity, String)] = [
            (.entry, "entry"), (.beforeTimers, "beforeTimers"), (.beforeSources, "beforeSources"),
            (.beforeWaiting, "beforeWaiting"), (.afterWaiting, "afterWaiting"), (.exit, "exit"),
        ]
        return names.filter { contains($0.0) }.map(\.1).joined(separator: "|")
    }
}

/// Why a run of the loop in a mode returned.
public enum LoopRunResult: Sendable, Hashable {
    /// The mode had no timers and no sources (or they all went away).
    case finished
    /// `ThreadLoop.stop()` ended this run.
    case stopped
    /// The deadline passed.
    case timedOut
    /// A source was handled and the run was asked to return after one.
    case handledSource
}

/// What can go wrong when using a run loop. Every case is a misuse or a fault the caller
/// can act on; nothing is dropped without one of these.
public enum ThreadLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A run, or another call that must happen on the loop's own thread, came from another thread.
    case notOnLoopThread
    /// The loop's thread has ended, or the loop stopped taking work (a stopped permanent thread).
    case loopEnded
    /// The timer, observer or source already belongs to another loop.
    case scheduledOnAnotherLoop
    /// The timer, observer or source was invalidated.
    case invalidated
    /// The descriptor is already watched by another source of this loop.
    case descriptorAlreadyWatched(CInt)
    /// A system call failed; `errno` says why.
    case system(operation: String, errno: CInt)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .notOnLoopThread: "this must be called on the loop's own thread"
        case .loopEnded: "the loop's thread has ended or no longer takes work"
        case .scheduledOnAnotherLoop: "the item is already scheduled on another loop"
        case .invalidated: "the item was invalidated"
        case .descriptorAlreadyWatched(let fd): "descriptor \(fd) is already watched by a source of this loop"
        case .system(let operation, let errno): "\(operation) failed: \(Errno(rawValue: errno))"
        }
    }

    init(_ operation: String, _ errno: Errno) {
        self = .system(operation: operation, errno: errno.rawValue)
    }
}
