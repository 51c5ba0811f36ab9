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
