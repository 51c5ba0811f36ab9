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
}
