import Glibc
import PermanentThread
import PortKitSystem

/// Who may connect: a rule a peer's credentials must meet, declared by the side that is
/// reached (a listening port, `ReceivePort.requirePeers(_:)`; a registered name, at the
/// name server). Every rule of a requirement must hold (`and(_:)` joins them).
///
/// ```swift
/// let port = ReceivePort()
/// port.requirePeers(.sameUser.and(.executable("/usr/bin/db-client")))
/// ```
///
/// The ids come from the kernel (SO_PEERCRED), never from the peer's word. An executable
/// is read through a pidfd of the peer (`/proc/PID/exe`, checked while the pidfd shows the
/// process alive): with SO_PEERPIDFD (Linux 6.5 and later) the pidfd names the process
/// that connected, so a recycled pid can never pass for it; on older kernels it is taken
/// with `pidfd_open` of the pid, which leaves a window between a peer's death and the
/// check in which another process may hold its pid (docs/NAMES.md, "Peer requirements").
public struct PeerRequirement: Sendable, CustomStringConvertible {
    /// One rule.
    package enum Rule: Sendable {
        /// The peer's uid is one of these.
        case uids(Set<uid_t>)
        /// The peer's gid (its primary group, as SO_PEERCRED names it) is one of these.
        case gids(Set<gid_t>)
        /// The peer runs as the owner's user (a listening port's process, a name's holder).
        case sameUser
        /// The peer's executable is this path.
        case executable(String)
        /// The caller's test, named for the errors; checked only where it was declared.
        case predicate(String, @Sendable (SenderCredentials) -> Bool)
    }

    /// The rules, all of which must hold.
    package let rules: [Rule]

    package init(rules: [Rule]) { self.rules = rules }

    /// Peers running as one of `uids`.
    public static func uids(_ uids: Set<uid_t>) -> PeerRequirement { PeerRequirement(rules: [.uids(uids)]) }

    /// Peers whose group (SO_PEERCRED's gid, the process's primary group) is one of `gids`.
    public static func gids(_ gids: Set<gid_t>) -> PeerRequirement { PeerRequirement(rules: [.gids(gids)]) }

    /// Peers running as the same user as the owner: a listening port's process, or the
    /// process that registered a name.
    public static let sameUser = PeerRequirement(rules: [.sameUser])

    /// Peers whose executable (`/proc/PID/exe`, read through the peer's pidfd) is `path`,
    /// compared byte for byte (give the path the kernel names: no symbolic link).
    public static func executable(_ path: String) -> PeerRequirement { PeerRequirement(rules: [.executable(path)]) }

    /// Peers for which `predicate` returns true. It runs on the loop that accepts the
    /// peer, with the credentials' `pidfd` set where one could be taken; `name` says what
    /// it checks, in errors. A predicate cannot travel: a registration's requirement that
    /// holds one is refused by the client library (only a listening port checks it).
    public static func matching(
        _ name: String, _ predicate: @escaping @Sendable (SenderCredentials) -> Bool
    ) -> PeerRequirement {
        PeerRequirement(rules: [.predicate(name, predicate)])
    }

    /// A requirement that holds when this one and `other` both hold.
    public func and(_ other: PeerRequirement) -> PeerRequirement { PeerRequirement(rules: rules + other.rules) }

    /// Whether it holds a predicate (which only the process that declared it can check).
    public var hasPredicate: Bool { rules.contains { if case .predicate = $0 { true } else { false } } }

    /// The rules, joined with ` and `: `uid in [1000]`, `gid in [100]`, `same user`,
    /// `executable /usr/bin/x`, `matching NAME`.
    public var description: String {
        rules.map { rule in
            switch rule {
            case .uids(let uids): "uid in \(uids.sorted())"
            case .gids(let gids): "gid in \(gids.sorted())"
            case .sameUser: "same user"
            case .executable(let path): "executable \(path)"
            case .predicate(let name, _): "matching \(name)"
            }
        }.joined(separator: " and ")
    }

    /// Checks a peer: `nil` when every rule holds, else what the peer failed. `ownerUID`
    /// is whom `sameUser` compares with; `process` takes a handle of the peer (called at
    /// most once, only when a rule needs one), which this call closes.
    package func refusal(
        of credentials: SenderCredentials, ownerUID: uid_t, process: () -> ProcessHandle?
    ) -> String? {
        var handle: ProcessHandle?
        var taken = false
        defer { handle?.close() }
        func peerProcess() -> ProcessHandle? {
            if !taken { (handle, taken) = (process(), true) }
            return handle
        }
        for rule in rules {
            switch rule {
            case .uids(let uids) where !uids.contains(credentials.uid):
                return "uid \(credentials.uid) is not in \(uids.sorted())"
            case .gids(let gids) where !gids.contains(credentials.gid):
                return "gid \(credentials.gid) is not in \(gids.sorted())"
            case .sameUser where credentials.uid != ownerUID:
                return "uid \(credentials.uid) is not the owner's (\(ownerUID))"
            case .executable(let path):
                guard let found = peerProcess()?.executablePath() else {
                    return "the executable of pid \(credentials.pid) cannot be read (gone, or another user's)"
                }
                if found != path { return "executable \(found) is not \(path)" }
            case .predicate(let name, let predicate):
                var shown = credentials
                shown.pidfd = peerProcess()?.descriptor.rawValue
                if !predicate(shown) { return "not matching \(name)" }
            default:
                continue
            }
        }
        return nil
    }
}
