/// A registered name and the process that holds it, as the name server reports it.
public struct NameOwner: Hashable, Sendable, CustomStringConvertible {
    /// The registered name.
    public var name: String
    /// The owner's process id (SO_PEERCRED of its connection).
    public var pid: Int32
    /// The owner's user id (SO_PEERCRED of its connection).
    public var uid: UInt32

    /// Makes an owner record.
    public init(name: String, pid: Int32, uid: UInt32) {
        self.name = name
        self.pid = pid
        self.uid = uid
    }

    /// `NAME<TAB>PID<TAB>UID`, the line `portname list` prints.
    public var description: String { "\(name)\t\(pid)\t\(uid)" }
}

/// A change seen by a watch: a name appeared (was registered) or vanished (was released,
/// or its owner's connection ended).
public enum NameEvent: Hashable, Sendable, CustomStringConvertible {
    /// The name was registered by `owner`.
    case appeared(NameOwner)
    /// The name, held by `owner`, was released.
    case vanished(NameOwner)

    /// The name and its owner.
    public var owner: NameOwner {
        switch self {
        case .appeared(let owner), .vanished(let owner): return owner
        }
    }

    /// `+ NAME PID UID` or `- NAME PID UID`, the line `portname watch` prints: the fields
    /// of a `list` line, in its order, after the sign.
    public var description: String {
        switch self {
        case .appeared(let owner): return "+ \(owner.name) \(owner.pid) \(owner.uid)"
        case .vanished(let owner): return "- \(owner.name) \(owner.pid) \(owner.uid)"
        }
    }
}
