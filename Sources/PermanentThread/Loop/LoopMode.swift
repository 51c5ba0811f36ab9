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
