import CPortKitSystem
import Glibc

/// A pidfd: a descriptor that names one process for as long as it is open, so that a pid
/// recycled after that process was reaped can never pass for it. What a peer requirement
/// reads a peer's executable through.
///
/// Taken from a connected socket with SO_PEERPIDFD where the kernel has it (Linux 6.5
/// and later: the process that connected, whatever became of its pid since), else with
/// `pidfd_open` of the SO_PEERCRED pid (Linux 5.3 and later), which names whoever holds
/// that pid now: between the peer's death and the call another process may hold it.
package struct ProcessHandle: Sendable {
    /// The pidfd; the caller owns it and closes it with `close()`.
    package let descriptor: FileDescriptor
    /// The process's id when the handle was taken.
    package let pid: pid_t
    /// Whether the handle came from the socket itself (SO_PEERPIDFD), not from the pid.
    package let fromSocket: Bool

    /// A handle of the process at the other end of `socket` (SO_PEERPIDFD), or, where the
    /// kernel has no such option, of `pid` (`pidfd_open`).
    ///
    /// The corresponding C functions are `getsockopt` with `SO_PEERPIDFD` and `pidfd_open`.
    package static func peer(of socket: FileDescriptor, pid: pid_t) throws(Errno) -> ProcessHandle {
        let taken = valueOrErrno { portkit_peer_pidfd(socket.rawValue) }
        switch taken {
        case .success(let raw): return ProcessHandle(descriptor: FileDescriptor(rawValue: raw), pid: pid, fromSocket: true)
        case .failure(let error) where error.rawValue == ENOPROTOOPT || error.rawValue == EINVAL:
            return try open(pid)
        case .failure(let error): throw error
        }
    }

    /// A handle of process `pid` as it is now.
    ///
    /// The corresponding C function is `pidfd_open`.
    package static func open(_ pid: pid_t) throws(Errno) -> ProcessHandle {
        let raw = try valueOrErrno { portkit_pidfd_open(pid) }.get()
        return ProcessHandle(descriptor: FileDescriptor(rawValue: raw), pid: pid, fromSocket: false)
    }

    /// Whether the process has not exited (so its pid is still its own).
    ///
    /// The corresponding C function is `poll` of the pidfd.
    package var isAlive: Bool {
        (try? valueOrErrno { portkit_pidfd_alive(descriptor.rawValue) }.get()) == 1
    }

    /// The path of the process's executable (`/proc/PID/exe`), read while the handle shows
    /// the process alive before and after: `nil` if it has exited (its pid may name another
    /// process by now) or the link cannot be read (another user's process, without the
    /// right to trace it).
    ///
    /// The corresponding C function is `readlink`.
    package func executablePath() -> String? {
        guard isAlive else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = buffer.withUnsafeMutableBufferPointer { readlink("/proc/\(pid)/exe", $0.baseAddress!, $0.count - 1) }
        guard count > 0, isAlive else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Closes the pidfd.
    package func close() { try? descriptor.close() }
}
