/// What a `StallMonitor` saw: a loop that stayed busy in one activity too long.
public struct StallReport: Sendable, CustomStringConvertible {
    /// The watched thread's name (a permanent thread's) or the loop's name.
    public var name: String
    /// The stalled thread's kernel id (as in `/proc/self/task/<id>`); 0 if the loop never
    /// ran while watched.
    public var threadID: Int32
    /// The activity the loop was in when it stopped making progress: the work that stalls
    /// runs after it (blocks and sources after `.beforeSources`, timers, descriptors and
    /// blocks after `.afterWaiting`).
    public var activity: LoopActivity
    /// How long the loop had been in that activity when the report was made.
    public var duration: Duration
    /// The label of the block running then (`execute(label:)`, `perform(label:)`), if any.
    public var label: String?
    /// The stalled thread's own stack, innermost frame first, symbolized where the binary
    /// exports symbols; empty when it could not be captured.
    public var stack: [String]

    /// Makes a report.
    public init(name: String, threadID: Int32, activity: LoopActivity, duration: Duration, label: String?, stack: [String]) {
        self.name = name
        self.threadID = threadID
        self.activity = activity
        self.duration = duration
        self.label = label
        self.stack = stack
    }

    /// A readable, multi-line report.
    public var description: String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        var text = "stall: '\(name)' (thread \(threadID)) busy in \(activity) for \(milliseconds) ms"
        if let label { text += ", running '\(label)'" }
        if stack.isEmpty {
            text += "\n  (stack not available)"
        } else {
            for (index, frame) in stack.enumerated() { text += "\n  #\(index) \(frame)" }
        }
        return text
    }
}
