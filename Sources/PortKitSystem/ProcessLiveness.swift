import Glibc

/// Whether another process is still there, as `/proc` says: for a client that must tell
/// a peer that went away from one that is only slow, when the peer's sockets may outlive
/// its death by a moment (a dying process releases its descriptors one by one).
package enum ProcessLiveness {
    /// The kernel's `PF_EXITING`: set as a process begins to exit, before its
    /// descriptors are released.
    private static let exitingFlag: UInt = 0x4

    /// Whether process `pid` is gone or on its way out: no such process, a zombie, or
    /// exiting. `false` when it cannot tell (no `/proc`, a pid of 0).
    ///
    /// The corresponding C functions are `open` and `read` of `/proc/PID/stat`.
    package static func isGone(_ pid: pid_t) -> Bool {
        guard pid > 0 else { return false }
        let opened = valueOrErrno { open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC) }
        let descriptor: FileDescriptor
        switch opened {
        case .success(let raw): descriptor = FileDescriptor(rawValue: raw)
        case .failure(let error): return error.rawValue == ENOENT || error.rawValue == ESRCH
        }
        defer { try? descriptor.close() }
        var bytes = [UInt8](repeating: 0, count: 1024)
        guard let count = try? bytes.withUnsafeMutableBytes({ try descriptor.read(into: $0) }), count > 0 else { return false }
        // "PID (COMMAND) STATE PPID PGRP SESSION TTY TPGID FLAGS …": COMMAND may hold
        // spaces and parentheses, so the fields are counted after its last ')'.
        guard let close = bytes[..<count].lastIndex(of: UInt8(ascii: ")")) else { return false }
        let fields = bytes[(close + 1)..<count].split(separator: UInt8(ascii: " "))
        guard fields.count > 6 else { return false }
        let state = fields[0].first
        if state == UInt8(ascii: "Z") || state == UInt8(ascii: "X") { return true }
        guard let flags = UInt(String(decoding: fields[6], as: UTF8.self)) else { return false }
        return flags & exitingFlag != 0
    }
}
