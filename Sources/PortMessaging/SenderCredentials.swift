import Glibc

/// Who sent a message: the process, user and group the kernel names for it, not what the
/// sender says of itself. Every message a port receives carries them (`Message.sender`).
public struct SenderCredentials: Sendable, Hashable, CustomStringConvertible {
    /// The sending process's id.
    public var pid: pid_t
    /// The sending process's user id.
    public var uid: uid_t
    /// The sending process's group id.
    public var gid: gid_t
    /// A pidfd of the process, while a `PeerRequirement` is checked: the predicate of
    /// `PeerRequirement.matching(_:_:)` may read the process through it (it names that
    /// process even once its pid is recycled), and must not close or keep it. Taken with
    /// SO_PEERPIDFD where the kernel has it (Linux 6.5 and later), else with `pidfd_open`
    /// of `pid`; `nil` everywhere else, and when neither worked. Not part of equality.
    public var pidfd: CInt?

    /// Credentials with these ids.
    public init(pid: pid_t, uid: uid_t, gid: gid_t) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// This process's: what a message sent in-process carries.
    public static let thisProcess = SenderCredentials(pid: getpid(), uid: getuid(), gid: getgid())

    /// `pid=… uid=… gid=…`.
    public var description: String { "pid=\(pid) uid=\(uid) gid=\(gid)" }

    /// Equal when the ids are (the pidfd is a borrowed descriptor, not an identity).
    public static func == (lhs: SenderCredentials, rhs: SenderCredentials) -> Bool {
        lhs.pid == rhs.pid && lhs.uid == rhs.uid && lhs.gid == rhs.gid
    }

    /// Hashes the ids.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(pid)
        hasher.combine(uid)
        hasher.combine(gid)
    }
}
