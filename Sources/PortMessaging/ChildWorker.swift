import Glibc
import PermanentThread
import PortKitSystem

/// A child process started with a channel to the boss's receive port, ready for the
/// check-in protocol: the parent spawns, the child calls `ChildWorker.bossPort()`.
///
/// The channel is a Unix stream socket pair (ports and descriptors can travel) or a pair of
/// pipes (bytes only), inherited by the child at descriptors 3 (and 4 for pipes) and named
/// in its environment (`PORTKIT_BOSS_FDS`).
public struct ChildWorker: Sendable {
    /// The kind of channel between parent and child.
    public enum Channel: Sendable {
        /// A SOCK_STREAM socket pair: ports and descriptors can travel.
        case socket
        /// Two pipes: bytes only.
        case pipes
    }

    /// The child's process id.
    public let pid: pid_t

    /// The environment variable that names the inherited descriptors in the child.
    public static let environmentKey = "PORTKIT_BOSS_FDS"

    /// Spawns `executable` with `arguments`, its channel adopted by `bossPort`, which
    /// must be scheduled for the child's check-in to arrive.
    /// - Throws: `PortError.system` when the channel or the process cannot be made.
    public static func spawn(
        executable: String, arguments: [String] = [], bossPort: ReceivePort, channel: Channel = .socket
    ) throws(PortError) -> ChildWorker {
        var parentEnds: [FileDescriptor] = []
        var childEnds: [FileDescriptor] = []
        switch channel {
        case .socket:
            let (parent, child) = try Connection.makeSocketPair()
            parentEnds = [parent]
            childEnds = [child]
        case .pipes:
            do {
                let toChild = try FileDescriptor.pipe()
                let toParent = try FileDescriptor.pipe()
                try toChild.write.setNonBlocking()
                try toParent.read.setNonBlocking()
                parentEnds = [toParent.read, toChild.write]
                childEnds = [toChild.read, toParent.write]
            } catch {
                throw PortError("pipe", error)
            }
        }
        defer { for end in childEnds { try? end.close() } }
        let pid: pid_t
        do {
            pid = try spawnProcess(executable, arguments, inheriting: childEnds)
        } catch {
            for end in parentEnds { try? end.close() }
            throw error
        }
        // Made once the child is there: over pipes the child is the peer the messages name.
        let connection = switch channel {
        case .socket: Connection(.socket(parentEnds[0]), limits: bossPort.limits)
        case .pipes:
            Connection(
                .pipes(read: parentEnds[0], write: parentEnds[1]), limits: bossPort.limits,
                pipePeer: SenderCredentials(pid: pid, uid: getuid(), gid: getgid()))
        }
        try bossPort.adopt(connection)
        return ChildWorker(pid: pid)
    }

    /// In the child: the send port to the boss that spawned it.
    /// - Throws: `.invalidPort` when the process was not spawned by `ChildWorker.spawn`.
    public static func bossPort() throws(PortError) -> SendPort {
        guard let raw = getenv(environmentKey) else { throw .invalidPort }
        let fds = String(cString: raw).split(separator: ",").compactMap { CInt($0) }
        unsetenv(environmentKey)
        let ends = fds.map(FileDescriptor.init(rawValue:))
        for end in ends {
            try? end.setCloseOnExec()
            try? end.setNonBlocking()
        }
        switch ends.count {
        case 1: return SendPort(connection: Connection(.socket(ends[0])))
        case 2:
            let parent = SenderCredentials(pid: getppid(), uid: getuid(), gid: getgid())
            return SendPort(connection: Connection(.pipes(read: ends[0], write: ends[1]), pipePeer: parent))
        default: throw .invalidPort
        }
    }

    /// Sends `signal` to the child. The corresponding C function is `kill`.
    public func kill(_ signal: CInt = SIGTERM) {
        try? SpawnedChild(pid: pid).signal(signal)
    }

    /// Waits for the child to end; returns its raw wait status (0 if it was reaped already).
    @discardableResult
    public func wait() -> CInt {
        (try? SpawnedChild(pid: pid).wait()) ?? 0
    }

    private static func spawnProcess(_ executable: String, _ arguments: [String], inheriting ends: [FileDescriptor]) throws(PortError) -> pid_t {
        // The ends become 3, 4, … in the child, named in its environment.
        let names = (0..<ends.count).map { String(3 + $0) }.joined(separator: ",")
        var environment = SpawnedChild.currentEnvironment.filter { !$0.hasPrefix(environmentKey + "=") }
        environment.append("\(environmentKey)=\(names)")
        let targets = ends.enumerated().map { ($0.element, CInt(3 + $0.offset)) }
        do {
            return try SpawnedChild.spawn(executable, arguments: arguments, environment: environment, descriptors: targets).pid
        } catch {
            throw PortError("posix_spawn \(executable)", error)
        }
    }
}
