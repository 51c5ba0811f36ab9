import Glibc

/// Changes among the entries of one directory (Linux inotify): a file made or moved in, or
/// its attributes changed. For waiting until a path appears (a server's socket) without
/// polling for it.
package struct DirectoryWatch {
    private let descriptor: FileDescriptor

    /// Starts watching `directory`.
    /// - Throws: the errno of `inotify_init1` or `inotify_add_watch` (`ENOENT`: no such
    ///   directory).
    package init(_ directory: String) throws(Errno) {
        let raw = try valueOrErrno { inotify_init1(CInt(IN_NONBLOCK) | CInt(IN_CLOEXEC)) }.get()
        descriptor = FileDescriptor(rawValue: raw)
        let mask = UInt32(IN_CREATE) | UInt32(IN_MOVED_TO) | UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF)
        do {
            _ = try valueOrErrno { inotify_add_watch(raw, directory, mask) }.get()
        } catch {
            try? descriptor.close()
            throw error
        }
    }

    /// The inotify descriptor, readable when something changed: for a loop's
    /// `DescriptorSource`, whose handler then calls `drain()`. The watch keeps ownership.
    package var readableDescriptor: CInt { descriptor.rawValue }

    /// Waits until something changed in the directory or `deadline` passed; whether
    /// something did. What was reported is read and dropped.
    package func waitForChange(until deadline: ContinuousClock.Instant) throws(Errno) -> Bool {
        let left = deadline - .now
        guard try descriptor.poll(CShort(POLLIN), timeout: left > .zero ? left : .zero) != 0 else { return false }
        drain()
        return true
    }

    /// Reads and drops what was reported so far, without waiting.
    package func drain() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while case .success(let count) = buffer.withUnsafeMutableBytes({ raw in
            valueOrErrno { Glibc.read(descriptor.rawValue, raw.baseAddress, raw.count) }
        }), count > 0 {}
    }

    /// Stops watching.
    package func close() {
        try? descriptor.close()
    }
}
