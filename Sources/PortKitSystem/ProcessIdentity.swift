import Glibc

/// What `/proc` says of another process: the executable it runs and its control group.
/// Either is `nil` where the kernel does not tell this process (no `/proc`, another user's
/// process without the right to read it, a process gone).
package enum ProcessIdentity {
    /// The path of the executable process `pid` runs (`/proc/PID/exe`).
    ///
    /// The corresponding C function is `readlink`.
    package static func executable(of pid: pid_t) -> String? {
        guard pid > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = valueOrErrno { readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1) }
        guard case .success(let length) = count, length > 0 else { return nil }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The control group process `pid` is in: the path of the unified hierarchy's entry of
    /// `/proc/PID/cgroup` (`0::/user.slice/…`), else the first entry's path.
    ///
    /// The corresponding C functions are `open` and `read` of `/proc/PID/cgroup`.
    package static func controlGroup(of pid: pid_t) -> String? {
        guard pid > 0 else { return nil }
        let opened = valueOrErrno { open("/proc/\(pid)/cgroup", O_RDONLY | O_CLOEXEC) }
        guard case .success(let raw) = opened else { return nil }
        let descriptor = FileDescriptor(rawValue: raw)
        defer { try? descriptor.close() }
        var bytes = [UInt8](repeating: 0, count: 4096)
        guard let count = try? bytes.withUnsafeMutableBytes({ try descriptor.read(into: $0) }), count > 0 else { return nil }
        let lines = bytes[..<count].split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        // "HIERARCHY-ID:CONTROLLERS:PATH"; the unified hierarchy is "0::PATH".
        let paths = lines.compactMap { line -> (unified: Bool, path: String)? in
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            return (parts[0] == "0" && parts[1].isEmpty, String(parts[2]))
        }
        return (paths.first { $0.unified } ?? paths.first)?.path
    }
}
