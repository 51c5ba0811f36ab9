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
