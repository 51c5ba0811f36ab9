import CPortKitSystem
import Glibc

/// How a child process ended, from its wait status.
package enum ChildEnd: Sendable, Hashable, CustomStringConvertible {
    /// It exited with this status.
    case exited(CInt)
    /// A signal ended it.
    case signalled(CInt)

    /// Reads a raw wait status (`waitpid`'s); `nil` for a stop or a continue.
    package init?(waitStatus status: CInt) {
        let signal = status & 0x7f
        if signal == 0 {
            self = .exited((status >> 8) & 0xff)
        } else if signal != 0x7f && status != 0xffff {
            self = .signalled(signal)
        } else {
            return nil
        }
    }

    /// "exited with status N" or "killed by signal N".
    package var description: String {
        switch self {
        case .exited(let status): "exited with status \(status)"
        case .signalled(let signal): "killed by signal \(signal)"
        }
    }
}

/// Starting a service, and following its end from a run loop.
extension SpawnedChild {
    /// Spawns `executable` (an absolute path) as a service: standard input from
    /// `/dev/null`, standard output and error this process's, no other descriptor of this
    /// process (every one from 3 up is closed in the child, close-on-exec or not), an
    /// empty signal mask and default dispositions.
    ///
    /// The corresponding C function is `posix_spawn`, with `posix_spawn_file_actions_addclosefrom_np`.
    package static func spawnService(
        _ executable: String, arguments: [String], environment: [String]
    ) throws(Errno) -> SpawnedChild {
        var pid: pid_t = 0
        let status = withSpawnArguments(executable, arguments, environment) { argv, envp in
            portkit_spawn_service(&pid, executable, argv, envp)
        }
        guard status == 0 else { throw Errno(rawValue: status) }
        return SpawnedChild(pid: pid)
    }

    /// Reaps the child if it has ended: how it ended, or `nil` while it runs.
    ///
    /// The corresponding C function is `waitpid`, with `WNOHANG`.
    package func reapIfEnded() throws(Errno) -> ChildEnd? {
        var status: CInt = 0
        let reaped = try valueOrErrno(.waitpid) { waitpid(pid, &status, WNOHANG) }.get()
        return reaped == pid ? ChildEnd(waitStatus: status) : nil
    }
}

/// Calls `body` with `executable` and `arguments` as a C argument vector and `environment`
/// as a C environment, both ending in a null pointer, valid for the call only.
func withSpawnArguments<R>(
    _ executable: String, _ arguments: [String], _ environment: [String],
    _ body: ([UnsafeMutablePointer<CChar>?], [UnsafeMutablePointer<CChar>?]) -> R
) -> R {
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup($0) } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    return body(argv, envp)
}
